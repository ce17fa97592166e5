// Pieces of whole tensors, for the ZeRO strategies (zero_shard.h,
// fully_sharded.h): each task holds 1-D pieces of the model's trainable tensors
// (its slice of a flat range), updates them with optimizer slots of the same
// pieces, writes them into a checkpoint as parts of the whole tensors, and loads
// them back out of whole tensors, whatever layout wrote those.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "nn/layer.h"
#include "strategy/strategy.h"

namespace dtrain::strategy {

// Where a piece lies: the whole param it is of (an index into a list of params)
// and the offset of its first element inside that param.
struct PieceOf {
  size_t param = 0;
  int64_t offset = 0;
};

// `tensors[j]` is a piece of `params[of[j % of.size()].param]` (so the optimizer's
// state, slot-major: slot k of every piece, then slot k + 1, fits too). The
// checkpoint pieces: each with its whole tensor's name (the piece's own) and shape.
std::vector<StatePiece> pieces_of(const std::vector<nn::Param*>& tensors, const std::vector<PieceOf>& of,
                                  const std::vector<nn::Param*>& params, bool optimizer);

// Copies into each of `tensors` (laid out as for pieces_of) its elements of the
// whole tensor `lookup` finds by the piece's name. A tensor of the piece's own
// shape is taken as the piece itself (restore_best_weights hands back what the
// strategy holds). ConfigError naming `what` ("model", "optimizer state") when
// a tensor is missing or of another shape.
void load_pieces(const std::vector<nn::Param*>& tensors, const std::vector<PieceOf>& of,
                 const std::vector<nn::Param*>& params, const Strategy::TensorLookup& lookup, const char* what);

// Keras' clipnorm (each param's gradient norm) or global_clipnorm (all of them
// together) over pieces spread across the tasks of `workers`: each param's sum of
// squares is summed over every task's pieces of it (one all-reduce of
// params.size() floats), then each piece's gradient is clipped. Collective.
void clip_pieces_by_norm(const std::vector<nn::Param*>& pieces, const std::vector<PieceOf>& of, size_t params,
                         comm::Communicator& workers, double clipnorm, double global_clipnorm);

// The same for a model split by layers and within them (tensor parallelism, a
// pipeline's stages): `params` are this task's, each whole or this task's part
// of a tensor split over `parts` (tensor_parallel's group; null: none). A
// param's sum of squares counts here when `counted[i]` (a tensor that every task
// of `parts` holds whole counts on one of them only); the sums are summed over
// `parts` (each param's whole norm: clipnorm), and for global_clipnorm their
// total over `stages` too (the other stages' params; null: none). Collective
// over both groups.
void clip_split_by_norm(const std::vector<nn::Param*>& params, const std::vector<bool>& counted,
                        comm::Communicator* parts, comm::Communicator* stages, double clipnorm,
                        double global_clipnorm);

}  // namespace dtrain::strategy
