// The one call from Go into C: the body of a transaction run by tyr_run_tx.
#define TYR_TYPES_ONLY
#include "tyr.h"

__attribute__((visibility("hidden"))) int tyr_call_tx_fn(tyr_tx_fn fn, tyr_tx tx, void *arg) {
	return fn(tx, arg);
}
