// The local communicator: collectives between replicas that run on threads of one
// process (the mirrored strategy's N replicas), through shared memory.
//
// The members of a group share one state: each collective is two rendezvous of
// all members (a generation-counting barrier on a mutex and condition variable).
// At the first, every member publishes its buffers; between the two, each member
// computes its part of the result by reading the others' buffers; after the
// second, nobody reads another member's buffer any more. Reductions add ranks
// 0..n-1 in that order for every element, so results are bit-identical whatever
// the thread timing. Like TF's MirroredStrategy on CPU: no network, no ring.
//
// Every wait has a deadline: a member that does not arrive in time fails the
// whole group with TimeoutError (naming the missing ranks); a member whose
// communicator is destroyed while others still call collectives fails them with
// PeerLost. Members calling different collectives (or counts) at the same step is
// an InternalError.
//
// Point-to-point (send/recv, so strategy tests can run pipeline stages on
// threads): a mailbox per (sender, receiver, tag); send copies the message in and
// returns, recv waits for it with the deadline (TimeoutError naming the peer and
// the tag), fails with PeerLost once the sender's communicator is destroyed
// without having sent it. split() makes new local groups among the members.
#pragma once

#include <memory>
#include <vector>

#include "comm/communicator.h"

namespace dtrain::comm {

// `size` communicators, ranks 0..size-1, for `size` threads of this process; each
// must be used by one thread. timeout_seconds bounds every wait for the others.
std::vector<std::unique_ptr<Communicator>> make_local_group(int size, double timeout_seconds = 60.0);

}  // namespace dtrain::comm
