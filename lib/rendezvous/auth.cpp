// Implementation of auth.h.
#include "rendezvous/auth.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/sha256.h"
#include "core/strings.h"

namespace dtrain::rendezvous {
namespace {

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ')) s.pop_back();
  return s;
}

}  // namespace

Credentials load_credentials(const CredentialSources& sources, const config::ClusterSpec& cluster) {
  Credentials c;
  if (!sources.env_job_id.empty()) {
    c.job_id = sources.env_job_id;
  } else if (!sources.config_job_id.empty()) {
    c.job_id = sources.config_job_id;
  } else {
    std::string addresses;
    for (const auto& task : cluster.all_tasks()) addresses += task.str() + "=" + cluster.address(task) + ";";
    c.job_id = "job-" + sha256_hex(addresses).substr(0, 16);
  }
  if (!sources.env_secret.empty()) {
    c.secret = sources.env_secret;
  } else if (!sources.secret_file.empty()) {
    std::ifstream in(sources.secret_file);
    if (!in)
      throw IoError(str("runtime.secret_file: cannot read '", sources.secret_file, "': ",
                        std::strerror(errno)));
    std::stringstream text;
    text << in.rdbuf();
    c.secret = trim(text.str());
    if (c.secret.empty())
      throw ConfigError(str("runtime.secret_file: '", sources.secret_file, "' is empty"));
  } else {
    throw ConfigError(
        "a multi-task job needs a shared secret: set DTRAIN_JOB_SECRET to the same value on every "
        "task (e.g. export DTRAIN_JOB_SECRET=$(openssl rand -hex 32)) or name a file holding it in "
        "runtime.secret_file; `dtrain launch` makes one itself");
  }
  return c;
}

std::string make_nonce() { return random_hex(16); }

std::string server_proof(const Credentials& c, const std::string& client_nonce,
                         const std::string& server_nonce) {
  return hmac_sha256(c.secret, str("server|", c.job_id, "|", client_nonce, "|", server_nonce));
}

std::string client_proof(const Credentials& c, const std::string& task,
                         const std::string& server_nonce, const std::string& client_nonce) {
  return hmac_sha256(c.secret, str("client|", c.job_id, "|", task, "|", server_nonce, "|", client_nonce));
}

std::string read_hello(const Message& m, const std::string& magic, Hello* out) {
  if (m.op != Op::kHello || m.fields.size() != 5 || m.fields[0] != magic)
    return str("is not a dtrain task of this version (no ", magic, " hello)");
  *out = {m.fields[1], m.fields[2], m.fields[3], m.fields[4]};
  if (out->client_nonce.empty()) return "sent an empty nonce";
  return "";
}

std::string other_job_text(const Hello& hello, const Credentials& c) {
  return str("belongs to job '", printable(hello.job_id), "', this is job '", c.job_id, "'");
}

bool proof_accepted(const Message& m, const Credentials& c, const Hello& hello, const std::string& server_nonce) {
  return m.op == Op::kProof && m.fields.size() == 1 &&
         constant_time_equal(m.fields[0], client_proof(c, hello.task, server_nonce, hello.client_nonce));
}

ClientHandshake::ClientHandshake(const Credentials& c, const std::string& magic_, const std::string& task_,
                                 const std::string& role_, const std::string& where_)
    : credentials(c), magic(magic_), task(task_), role(role_), where(where_), client_nonce(make_nonce()) {}

Message ClientHandshake::hello() const {
  return {Op::kHello, 0, {magic, credentials.job_id, task, role, client_nonce}};
}

Message ClientHandshake::proof_for(const Message& challenge) const {
  if (challenge.op == Op::kError)
    throw ConfigError(str(where, " refused this task: ", reply_text(challenge, "(no reason given)")));
  if (challenge.op != Op::kChallenge || challenge.fields.size() != 2)
    throw ConfigError(str(where, " is not a dtrain server of this version (", magic, ")"));
  if (!constant_time_equal(challenge.fields[1], server_proof(credentials, client_nonce, challenge.fields[0])))
    throw ConfigError(str(where, " does not know this job's secret: is another job using that address, "
                                 "or is DTRAIN_JOB_SECRET different there?"));
  return {Op::kProof, 0, {client_proof(credentials, task, challenge.fields[0], client_nonce)}};
}

ConfigError ClientHandshake::rejected_proof() const {
  return ConfigError(str(where, " rejected this task's proof of the job secret: is DTRAIN_JOB_SECRET (or "
                                "runtime.secret_file) the same on every task?"));
}

int64_t ClientHandshake::check_welcome(const Message& reply) const {
  if (reply.op != Op::kWelcome) throw rejected_proof();
  return reply.number;
}

int64_t client_handshake(const std::function<Message(const Message&)>& roundtrip, const Credentials& c,
                         const std::string& magic, const std::string& task, const std::string& role,
                         const std::string& where) {
  const ClientHandshake handshake(c, magic, task, role, where);
  const Message challenge = roundtrip(handshake.hello());
  return handshake.check_welcome(roundtrip(handshake.proof_for(challenge)));
}

}  // namespace dtrain::rendezvous
