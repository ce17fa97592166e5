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

}  // namespace dtrain::rendezvous
