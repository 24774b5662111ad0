// Placeholder: filled in by the gdn oracle work.
#include "replayssm_ref.h"
