// Communicators for tasks that share a machine.
//
// The shared-memory communicator: collectives between the processes of one job on
// one machine through one POSIX shared-memory segment, without the network
// stack's copies. Each member has a slot of `capacity_floats`; a collective goes
// in chunks of that size: every member copies its chunk into its slot, all meet
// (a barrier: an atomic counter and a generation word in the segment, waited on
// with a futex), each member reduces its share of the elements over the slots in
// rank order (so every member gets bit-identical sums) into the result area, all
// meet, each copies the result out (two meetings a chunk: nobody writes the
// result area again before everyone has reached the next chunk's first meeting,
// after copying out). all_reduce_pieces copies straight between the caller's
// pieces and the segment (reduces_pieces_in_place). shared_area() makes a second
// segment with an area per member (a multi_worker_mirrored task's gradients live
// there): pieces lying in it are reduced where they are, each member summing its
// share over all areas and writing the result into every one (two meetings, no
// copy in or out; a few values outside the area go through a spill room after
// it). Every wait has the
// communicator's deadline (TimeoutError); a member that fails or is destroyed
// marks the segment broken and wakes the others (PeerLost). Local rank 0 creates
// the segment and publishes its name in the job's store; once every member has
// mapped it, the name is unlinked, so nothing is left in /dev/shm whatever
// happens next. While a wait lasts, the heartbeats are asked every 50 ms whether
// a member was lost (a killed process leaves no mark in the segment): PeerLost.
//
// The hierarchical communicator (strategy.communication "hierarchical"): the
// tasks of each machine reduce through shared memory, one leader per machine
// (its lowest rank) all-reduces across machines over Gloo, and the leader's
// result is shared back through shared memory. Cross-machine traffic is then
// that of one task per machine. With a single machine it is the shared-memory
// all-reduce alone (its all_reduce_pieces too).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.h"

namespace dtrain::rendezvous {
class Store;
}

namespace dtrain::comm {

struct ShmOptions {
  int rank = 0;  // within the machine's group
  int size = 1;
  // Namespace of this group's keys in the job's store (as GlooOptions::prefix);
  // also names the segment, with `job_id`.
  std::string prefix = "comm/shm/";
  std::string job_id;
  double timeout_seconds = 60.0;  // every wait for the other members
  size_t capacity_floats = size_t{1} << 20;  // per member: 4 MiB
  // Polled (every kPeerPoll) while a wait lasts: a member killed in the middle
  // of a collective leaves no mark in the segment, so the heartbeats tell (and
  // the wait throws PeerLost). May be empty.
  PeerLostCheck peer_lost;
};

// Joins the machine's group (collective over its members). TimeoutError when a
// member does not come within timeout_seconds; IoError when the segment cannot
// be made (naming /dev/shm and the reason).
std::unique_ptr<Communicator> make_shm_communicator(rendezvous::Store& store, const ShmOptions& options);

// Which machine each rank of a group is on: host_of[r] (0..hosts-1, numbered in
// the order of each machine's lowest rank) and local_rank_of[r] (its rank among
// the ranks of its machine, in rank order).
struct HostLayout {
  std::vector<int> host_of;
  std::vector<int> local_rank_of;
  int hosts() const;
  // From one host key per rank (equal keys: one machine).
  static HostLayout from_keys(const std::vector<std::string>& host_of_rank);
};

// The hierarchical communicator of global rank `rank` of layout.host_of.size()
// ranks: `local` is its machine's group (ranks = local ranks), `leaders` the
// group of the machines' leaders (ranks = machine numbers) on a leader, nullptr
// on the other members.
std::unique_ptr<Communicator> make_hierarchical_communicator(int rank, HostLayout layout,
                                                             std::unique_ptr<Communicator> local,
                                                             std::unique_ptr<Communicator> leaders);

}  // namespace dtrain::comm
