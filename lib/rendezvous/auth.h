// The job secret and the HMAC challenge-response that every rendezvous connection
// goes through.
//
//   client -> server  hello     {magic, job_id, task, role, client_nonce}
//   server -> client  challenge {server_nonce, HMAC(secret, "server|job|cn|sn")}
//   client -> server  proof     {HMAC(secret, "client|job|task|sn|cn")}
//   server -> client  welcome
//
// Both sides prove they know the secret without sending it; fresh nonces on both
// sides stop replays; the job id keeps two jobs on the same ports apart. Traffic
// after the handshake is not encrypted: the secret protects who may take part,
// not what an eavesdropper on the network can read.
#pragma once

#include <functional>

#include <string>

#include "config/cluster_spec.h"
#include "core/error.h"
#include "rendezvous/wire.h"

namespace dtrain::rendezvous {

inline constexpr const char* kProtocolMagic = "dtrain-rendezvous-1";

struct Credentials {
  std::string job_id;
  std::string secret;
};

// Where the job id and the secret may come from, strongest first.
struct CredentialSources {
  std::string env_job_id;     // DTRAIN_JOB_ID ("" = unset)
  std::string config_job_id;  // runtime.job_id
  std::string env_secret;     // DTRAIN_JOB_SECRET
  std::string secret_file;    // runtime.secret_file
};

// The job id: DTRAIN_JOB_ID, else runtime.job_id, else derived from the cluster's
// addresses (the same on every task of the job). The secret: DTRAIN_JOB_SECRET,
// else the contents of runtime.secret_file. No secret is a ConfigError that says
// how to set one.
Credentials load_credentials(const CredentialSources& sources, const config::ClusterSpec& cluster);

std::string make_nonce();  // 16 random bytes, hex
std::string server_proof(const Credentials& c, const std::string& client_nonce,
                         const std::string& server_nonce);
std::string client_proof(const Credentials& c, const std::string& task,
                         const std::string& server_nonce, const std::string& client_nonce);

// A client's hello as a server reads it (the store's and the ps's handshakes).
struct Hello {
  std::string job_id;
  std::string task;
  std::string role;
  std::string client_nonce;
};

// Reads a hello of the protocol `magic` (kProtocolMagic, or the ps's) into *out.
// Returns why it is refused, "" when it is one: another op, fields or magic (not a
// dtrain task of this version), or an empty nonce. The reason follows "it " in a
// log line and quotes nothing the peer sent.
std::string read_hello(const Message& m, const std::string& magic, Hello* out);

// "belongs to job '<its id>', this is job '<ours>'": the peer's id escaped and cut
// short (dtrain::printable), for the log and the error reply.
std::string other_job_text(const Hello& hello, const Credentials& c);

// Whether `m` proves that the client of `hello` knows the secret: a proof whose one
// field is client_proof(c, hello.task, server_nonce, hello.client_nonce), compared in
// constant time.
bool proof_accepted(const Message& m, const Credentials& c, const Hello& hello, const std::string& server_nonce);

// The client's side of the handshake (the store's clients and a ps's): the hello
// of protocol `magic` as `task` in `role`, the server's proof checked, this task's
// proof, the welcome; `roundtrip` sends one frame and returns the reply. Returns
// the welcome's number (the store's control connection: its incarnation).
// ConfigErrors name `where` ("the chief (chief:0 at 10.0.0.1:2222)", "ps:1 at
// ...") and say what to check: a server that refused (its reason), one that is
// not of this protocol, one that does not know the secret, one that refused ours.
int64_t client_handshake(const std::function<Message(const Message&)>& roundtrip, const Credentials& c,
                         const std::string& magic, const std::string& task, const std::string& role,
                         const std::string& where);

// The same handshake in steps, so that a client can send its proof together with
// its first requests (one round trip fewer): the hello, then (given the
// challenge) the proof to send, then the check of the welcome.
struct ClientHandshake {
  ClientHandshake(const Credentials& c, const std::string& magic, const std::string& task, const std::string& role,
                  const std::string& where);
  Message hello() const;
  // The proof that answers `challenge`; ConfigError when the server refused this
  // task or does not know the secret.
  Message proof_for(const Message& challenge) const;
  // The welcome's number; ConfigError when `reply` is not a welcome (the server
  // rejected the proof). A server that hung up instead: rejected_proof() too.
  int64_t check_welcome(const Message& reply) const;
  ConfigError rejected_proof() const;

  Credentials credentials;
  std::string magic, task, role, where, client_nonce;
};

}  // namespace dtrain::rendezvous
