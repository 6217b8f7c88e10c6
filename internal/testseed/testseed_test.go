package testseed

import "testing"

func TestFromEnvReplaysTheGivenSeed(t *testing.T) {
	t.Setenv("TYR_TEST_SEED", "42")
	if got := FromEnv(t, "TYR_TEST_SEED"); got != 42 {
		t.Fatalf("FromEnv = %d, want 42", got)
	}
}
