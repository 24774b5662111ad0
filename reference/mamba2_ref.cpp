// Placeholder: filled in by the mamba2 oracle work.
#include "replayssm_ref.h"
