// Errors raised by the engine. They derive from replayssm::Error, so one catch covers the library.
#pragma once
#include "replayssm/errors.h"

namespace replayssm::engine {

/// A checkpoint file or directory is malformed or does not match its config: truncated file,
/// header length past the end, bad JSON, unknown dtype string, offsets outside the data or
/// overlapping, a missing tensor, a shape that disagrees with config.json. what() names the file
/// and the offending tensor, e.g. "model.safetensors: tensor 'backbone.norm_f.weight': shape [64],
/// expected [128]".
class CheckpointError : public Error { using Error::Error; };

/// A call out of order: Model::accept() without a pending verify(), or step / verify / reset while
/// a verify() still awaits its accept().
class ProtocolError : public Error { using Error::Error; };

}  // namespace replayssm::engine
