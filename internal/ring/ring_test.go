// This file proves that the placement core is correct, stable and even:
//
//   - New rejects bad configs and memberships with errors naming the problem.
//   - Placement is a function of the membership alone: any input order gives
//     the same tokens and replicas, and golden values pin the wire-stable
//     hashes (cross-checked against Python's xxhash.xxh64) so they cannot
//     change silently.
//   - Replicas always returns rf distinct members, primary first, and agrees
//     with a naive reference (linear scan over sorted tokens, built from the
//     documented encoding with no shared code) on random rings and positions,
//     including positions exactly on, just before and just after tokens.
//   - Shares are even: the spread of ownership across equal nodes is the
//     1/sqrt(tokens) of independent random tokens, and weights are honoured.
//   - Membership changes move the minimum: a joining node takes only
//     placements that move to it, about 1/17 of them when it is the 17th; a
//     leaving node gives up only its own; a heavier weight only gains.
//
// Randomized property tests print their seed; rerun one with
//
//	go test ./internal/ring -run TestName -ring.seed=N
//
// Statistical tests (balance, weights) use fixed seeds so CI is
// deterministic; their bounds sit at three or more standard deviations from
// the theoretical value, so a new seed should pass too. The numbers they
// measure are logged with -v.
package ring

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/tyrstore/tyr/internal/errs"
)

var seedFlag = flag.Uint64("ring.seed", 0, "seed for randomized ring property tests; 0 picks one and logs it")

// newRand returns a seeded source for a property test, logging the seed.
func newRand(t *testing.T) *rand.Rand {
	t.Helper()
	seed := *seedFlag
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d; reproduce with: go test ./internal/ring -run '^%s$' -ring.seed=%d", seed, t.Name(), seed)
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}

// numberedNodes returns n nodes of weight w named prefix00, prefix01, ...
func numberedNodes(prefix string, n int, w uint32) []Node {
	nodes := make([]Node, n)
	for i := range nodes {
		nodes[i] = Node{ID: NodeID(fmt.Sprintf("%s%02d", prefix, i)), Weight: w}
	}
	return nodes
}

// randomNodes returns n nodes of weight 1 with random IDs.
func randomNodes(rng *rand.Rand, n int) []Node {
	nodes := make([]Node, n)
	for i := range nodes {
		nodes[i] = Node{ID: NodeID(fmt.Sprintf("%016x-%d", rng.Uint64(), i)), Weight: 1}
	}
	return nodes
}

func mustNew(t testing.TB, cfg Config, epoch uint64, nodes []Node) *Ring {
	t.Helper()
	r, err := New(cfg, epoch, nodes)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return r
}

// randomPlacements returns n placements over a few keyspaces, with keys of
// random bytes (including ':' and '#') and mostly small chunk numbers.
func randomPlacements(rng *rand.Rand, n int) []Placement {
	seeds := []uint64{KeyspaceSeed("photos"), KeyspaceSeed("logs"), KeyspaceSeed("tmp")}
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789/:#._-"
	sample := make([]Placement, n)
	for i := range sample {
		key := make([]byte, 1+rng.IntN(40))
		for j := range key {
			key[j] = alphabet[rng.IntN(len(alphabet))]
		}
		chunk := rng.Uint64N(16)
		if rng.IntN(10) == 0 {
			chunk = rng.Uint64()
		}
		sample[i] = Placement{Seed: seeds[rng.IntN(len(seeds))], Key: string(key), Chunk: chunk}
	}
	return sample
}

func TestConfigAndMembershipValidation(t *testing.T) {
	a, b := Node{ID: "a", Weight: 1}, Node{ID: "b", Weight: 1}
	tests := []struct {
		name  string
		cfg   Config
		nodes []Node
		want  []string // substrings of the error; nil means success
	}{
		{name: "ok", nodes: []Node{a, b}},
		{name: "one node", nodes: []Node{a}},
		{name: "no nodes", nodes: nil, want: []string{"no nodes"}},
		{name: "empty ID", nodes: []Node{a, {ID: "", Weight: 1}}, want: []string{"node 1: empty ID"}},
		{name: "zero weight", nodes: []Node{a, {ID: "b"}}, want: []string{`node 1 ("b"): weight 0`}},
		{name: "duplicate ID", nodes: []Node{a, b, a, a}, want: []string{`node ID "a" appears 3 times`}},
		{name: "long ID", nodes: []Node{{ID: NodeID(strings.Repeat("x", NodeIDBytesMax+1)), Weight: 1}},
			want: []string{"256 bytes, longer than the limit of 255"}},
		{name: "ID at limit", nodes: []Node{{ID: NodeID(strings.Repeat("x", NodeIDBytesMax)), Weight: 1}}},
		{name: "non-UTF-8 ID", nodes: []Node{{ID: "\xff", Weight: 1}}, want: []string{"not valid UTF-8"}},
		{name: "every problem reported", nodes: []Node{{ID: ""}, b, b},
			want: []string{"node 0: empty ID", `node 0 (""): weight 0`, `"b" appears 2 times`}},
		{name: "problems capped", nodes: make([]Node, 40),
			want: []string{"node 7: empty ID", "and 64 more problems"}},
		{name: "too many tokens", cfg: Config{TokensMax: 255}, nodes: []Node{a, b},
			want: []string{"than the limit of 255"}},
		{name: "huge weight", nodes: []Node{{ID: "a", Weight: math.MaxUint32}, {ID: "b", Weight: math.MaxUint32}},
			want: []string{"than the limit of 1048576"}},
		{name: "vnodes too many", cfg: Config{VirtualNodesPerWeight: VirtualNodesPerWeightMax + 1}, nodes: []Node{a},
			want: []string{"virtual nodes per weight 65537 out of range"}},
		{name: "tokens max too big", cfg: Config{TokensMax: TokensMaxCeiling + 1}, nodes: []Node{a},
			want: []string{"tokens max 16777217 out of range"}},
		{name: "unknown hash version", cfg: Config{HashVersion: 2}, nodes: []Node{a},
			want: []string{"hash version 2 unknown"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := New(tt.cfg, 7, tt.nodes)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				if r.Len() != len(tt.nodes) || r.Epoch() != 7 {
					t.Fatalf("Len %d Epoch %d, want %d 7", r.Len(), r.Epoch(), len(tt.nodes))
				}
				return
			}
			if err == nil {
				t.Fatalf("New succeeded, want error containing %q", tt.want)
			}
			if !errors.Is(err, ErrInvalid) || !errors.Is(err, errs.ErrInvalidArgument) {
				t.Errorf("error %v does not wrap ErrInvalid", err)
			}
			if !strings.HasPrefix(err.Error(), "ring: ") {
				t.Errorf("error %q lacks the package prefix", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestConfigDefaults(t *testing.T) {
	r := mustNew(t, Config{}, 1, []Node{{ID: "a", Weight: 3}})
	want := Config{VirtualNodesPerWeight: 128, TokensMax: 1 << 20, HashVersion: HashV1}
	if got := r.Config(); got != want {
		t.Fatalf("Config() = %+v, want %+v", got, want)
	}
	if len(r.positions) != 3*128 || len(r.owners) != 3*128 {
		t.Fatalf("%d tokens, want %d", len(r.positions), 3*128)
	}
}

func TestReplicasErrors(t *testing.T) {
	r := mustNew(t, Config{}, 9, numberedNodes("n", 3, 1))
	for _, rf := range []int{0, -1} {
		if _, err := r.Replicas(1, "k", 0, rf); !errors.Is(err, ErrInvalid) {
			t.Errorf("rf %d: error %v, want ErrInvalid", rf, err)
		}
	}
	_, err := r.Replicas(1, "k", 0, 4)
	if !errors.Is(err, ErrTooFewNodes) || !errors.Is(err, errs.ErrUnavailable) {
		t.Fatalf("rf 4 on 3 nodes: error %v, want ErrTooFewNodes", err)
	}
	if want := "replication factor 4, but the ring at epoch 9 has 3 node(s)"; !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not contain %q", err, want)
	}
	dst := []NodeID{"x"}
	got, err := r.AppendReplicas(dst, 1, "k", 0, 4)
	if err == nil || !slices.Equal(got, dst) {
		t.Errorf("AppendReplicas on error = %q, %v; want dst unchanged and an error", got, err)
	}
	if _, err := r.VersionManagers(1, "k", 4); !errors.Is(err, ErrTooFewNodes) {
		t.Errorf("VersionManagers rf 4: error %v, want ErrTooFewNodes", err)
	}
	if _, err := Compare(r, r, nil, 4); !errors.Is(err, ErrTooFewNodes) {
		t.Errorf("Compare rf 4: error %v, want ErrTooFewNodes", err)
	}
	var zero Ring
	if _, err := zero.Replicas(1, "k", 0, 1); !errors.Is(err, ErrTooFewNodes) {
		t.Errorf("zero Ring: error %v, want ErrTooFewNodes", err)
	}
	if got := zero.Ownership(); len(got) != 0 {
		t.Errorf("zero Ring: Ownership() = %v, want empty", got)
	}
}

// TestGolden pins the wire-stable hashes and a few placements. If this test
// fails, placement changed: every existing cluster would lose track of its
// data. Do not update the values; add a new HashVersion instead (hash.go).
// The hash values were checked against an independent implementation,
// Python's xxhash package: xxhash.xxh64(b"cat.jpg:3", seed=0xd6ae3d8e1301bd93).
func TestGolden(t *testing.T) {
	if got := xxhash.Sum64String(""); got != 0xef46db3751d8e999 {
		t.Fatalf("XXH64(\"\") = %#x; the hash library is not standard XXH64", got)
	}
	photos := KeyspaceSeed("photos")
	hashes := []struct {
		name      string
		got, want uint64
	}{
		{`KeyspaceSeed("photos")`, photos, 0xd6ae3d8e1301bd93},
		{`Position(photos, "cat.jpg", 0)`, Position(photos, "cat.jpg", 0), 0xe8894e7ab2ff650a},
		{`Position(photos, "cat.jpg", 3)`, Position(photos, "cat.jpg", 3), 0xdf31cf64a2a51eef},
		{`Position(0, "", 0)`, Position(0, "", 0), 0xacc7366e0b6a74fd},
		{`Position(photos, "a/b:c", MaxUint64)`, Position(photos, "a/b:c", math.MaxUint64), 0x6dad945ad3785efa},
		{`tokenPosition("node-00", 0)`, tokenPosition("node-00", 0), 0x363c207c7d719348},
		{`tokenPosition("node-00", 127)`, tokenPosition("node-00", 127), 0xceb44ff03f903498},
	}
	for _, h := range hashes {
		if h.got != h.want {
			t.Errorf("%s = %#016x, want %#016x", h.name, h.got, h.want)
		}
	}

	r := mustNew(t, Config{}, 1, numberedNodes("node-", 16, 1))
	placements := []struct {
		key   string
		chunk uint64
		want  []NodeID
	}{
		{"cat.jpg", 0, []NodeID{"node-12", "node-08", "node-09"}},
		{"cat.jpg", 1, []NodeID{"node-13", "node-08", "node-06"}},
		{"cat.jpg", 7, []NodeID{"node-09", "node-03", "node-06"}},
		{"logs/2024/01/01.log", 0, []NodeID{"node-13", "node-05", "node-07"}},
		{"x", 1, []NodeID{"node-15", "node-00", "node-04"}},
	}
	for _, p := range placements {
		got, err := r.Replicas(photos, p.key, p.chunk, 3)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, p.want) {
			t.Errorf("Replicas(photos, %q, %d, 3) = %q, want %q", p.key, p.chunk, got, p.want)
		}
	}
	vm, err := r.VersionManagers(photos, "cat.jpg", 3)
	if err != nil || !slices.Equal(vm, placements[0].want) {
		t.Errorf("VersionManagers(photos, cat.jpg, 3) = %q, %v; want the replicas of chunk 0, %q", vm, err, placements[0].want)
	}
}

func TestKeyspacesPlaceDifferently(t *testing.T) {
	if KeyspaceSeed("a") == KeyspaceSeed("b") {
		t.Fatal("two keyspaces share a seed")
	}
	if Position(KeyspaceSeed("a"), "k", 0) == Position(KeyspaceSeed("b"), "k", 0) {
		t.Fatal("a key has the same position in two keyspaces")
	}
}

func TestDeterministicAcrossInputOrder(t *testing.T) {
	rng := newRand(t)
	nodes := numberedNodes("node-", 16, 1)
	nodes[3].Weight, nodes[9].Weight = 2, 3
	want := mustNew(t, Config{}, 4, nodes)
	sample := randomPlacements(rng, 500)
	for range 5 {
		shuffled := slices.Clone(nodes)
		rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		got := mustNew(t, Config{}, 4, shuffled)
		if !slices.Equal(got.positions, want.positions) || !slices.Equal(got.owners, want.owners) ||
			!slices.Equal(got.Nodes(), want.Nodes()) {
			t.Fatalf("membership order %v changed the ring", shuffled)
		}
		for _, p := range sample {
			a, errA := got.Replicas(p.Seed, p.Key, p.Chunk, 3)
			b, errB := want.Replicas(p.Seed, p.Key, p.Chunk, 3)
			if errA != nil || errB != nil || !slices.Equal(a, b) {
				t.Fatalf("%+v: %q, %v vs %q, %v", p, a, errA, b, errB)
			}
		}
	}
	if !slices.IsSortedFunc(want.Nodes(), func(a, b Node) int { return cmp.Compare(a.ID, b.ID) }) {
		t.Errorf("Nodes() not sorted by ID: %v", want.Nodes())
	}
}

func TestOneNodeRing(t *testing.T) {
	r := mustNew(t, Config{}, 1, []Node{{ID: "solo", Weight: 1}})
	for _, key := range []string{"", "a", "b/c"} {
		for _, chunk := range []uint64{0, 1, math.MaxUint64} {
			got, err := r.Replicas(5, key, chunk, 1)
			if err != nil || !slices.Equal(got, []NodeID{"solo"}) {
				t.Fatalf("Replicas(%q, %d) = %q, %v; want [solo]", key, chunk, got, err)
			}
		}
	}
	if got := r.Ownership(); len(got) != 1 || got["solo"] != 1 {
		t.Fatalf("Ownership() = %v, want map[solo:1]", got)
	}
	// A single token: the arithmetic that gives every other token its arc
	// would give it none.
	one := mustNew(t, Config{VirtualNodesPerWeight: 1}, 1, []Node{{ID: "solo", Weight: 1}})
	if got := one.Ownership(); got["solo"] != 1 {
		t.Fatalf("one-token Ownership() = %v, want map[solo:1]", got)
	}
	if !r.Contains("solo") || r.Contains("other") {
		t.Fatal("Contains is wrong")
	}
}

// naiveRing is the reference placement: tokens rebuilt from the documented
// HashV1 encoding, sorted by (position, node ID), and searched linearly.
type naiveRing struct {
	positions []uint64
	ids       []NodeID
	nodes     int
}

func newNaiveRing(vnodesPerWeight uint32, nodes []Node) naiveRing {
	var n naiveRing
	type token struct {
		position uint64
		id       NodeID
	}
	var tokens []token
	for _, node := range nodes {
		for i := 0; i < int(node.Weight)*int(vnodesPerWeight); i++ {
			h := xxhash.Sum64String(string(node.ID) + "#" + strconv.Itoa(i))
			tokens = append(tokens, token{h, node.ID})
		}
	}
	sort.Slice(tokens, func(i, j int) bool {
		if tokens[i].position != tokens[j].position {
			return tokens[i].position < tokens[j].position
		}
		return tokens[i].id < tokens[j].id
	})
	for _, tok := range tokens {
		n.positions = append(n.positions, tok.position)
		n.ids = append(n.ids, tok.id)
	}
	n.nodes = len(nodes)
	return n
}

func naivePosition(seed uint64, key string, chunk uint64) uint64 {
	d := xxhash.NewWithSeed(seed)
	_, _ = d.WriteString(key + ":" + strconv.FormatUint(chunk, 10))
	return d.Sum64()
}

func (n naiveRing) replicas(position uint64, rf int) []NodeID {
	start := 0 // wraps to the first token if none is at or after position
	for i, p := range n.positions {
		if p >= position {
			start = i
			break
		}
	}
	seen := map[NodeID]bool{}
	var out []NodeID
	for i := 0; len(out) < rf && i < len(n.ids); i++ {
		id := n.ids[(start+i)%len(n.ids)]
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

// TestReplicasMatchesNaive compares the binary-search walk against the naive
// linear scan, on random rings with few tokens per node (so walks skip many
// repeated owners and wrap often) and rf up to the node count, past the
// inline distinctness check.
func TestReplicasMatchesNaive(t *testing.T) {
	rng := newRand(t)
	for range 25 {
		n := 1 + rng.IntN(24)
		nodes := randomNodes(rng, n)
		for i := range nodes {
			nodes[i].Weight = 1 + rng.Uint32N(3)
		}
		cfg := Config{VirtualNodesPerWeight: 1 + rng.Uint32N(8)}
		r := mustNew(t, cfg, 1, nodes)
		naive := newNaiveRing(cfg.VirtualNodesPerWeight, nodes)

		// Positions on, next to and between tokens, and the ring's ends.
		positions := []uint64{0, 1, math.MaxUint64}
		for _, p := range naive.positions {
			positions = append(positions, p, p-1, p+1)
		}
		for _, p := range randomPlacements(rng, 200) {
			pos := Position(p.Seed, p.Key, p.Chunk)
			if want := naivePosition(p.Seed, p.Key, p.Chunk); pos != want {
				t.Fatalf("Position(%+v) = %#x, naive %#x", p, pos, want)
			}
			positions = append(positions, pos)
		}
		for _, pos := range positions {
			rf := 1 + rng.IntN(n)
			got := r.appendReplicas(nil, pos, rf)
			if want := naive.replicas(pos, rf); !slices.Equal(got, want) {
				t.Fatalf("ring %v cfg %+v position %#x rf %d: got %q, naive %q", nodes, cfg, pos, rf, got, want)
			}
		}
	}
}

// TestReplicasDistinct checks the contract of Replicas on random rings and
// keys: rf distinct members, the first being the owner of the position.
func TestReplicasDistinct(t *testing.T) {
	rng := newRand(t)
	for range 30 {
		n := 1 + rng.IntN(40)
		nodes := randomNodes(rng, n)
		r := mustNew(t, Config{VirtualNodesPerWeight: 1 + rng.Uint32N(32)}, 1, nodes)
		var dst []NodeID
		for _, p := range randomPlacements(rng, 300) {
			rf := 1 + rng.IntN(n)
			got, err := r.Replicas(p.Seed, p.Key, p.Chunk, rf)
			if err != nil {
				t.Fatal(err)
			}
			seen := map[NodeID]bool{}
			for _, id := range got {
				if seen[id] || !r.Contains(id) {
					t.Fatalf("%d nodes, %+v rf %d: %q has a repeat or a stranger", n, p, rf, got)
				}
				seen[id] = true
			}
			if len(got) != rf {
				t.Fatalf("%d nodes, %+v rf %d: got %d replicas", n, p, rf, len(got))
			}
			if want := r.nodes[r.owners[r.successor(Position(p.Seed, p.Key, p.Chunk))]].ID; got[0] != want {
				t.Fatalf("%+v: primary %q, owner of the position %q", p, got[0], want)
			}
			dst, err = r.AppendReplicas(dst[:0], p.Seed, p.Key, p.Chunk, rf)
			if err != nil || !slices.Equal(dst, got) {
				t.Fatalf("AppendReplicas = %q, %v; Replicas = %q", dst, err, got)
			}
		}
	}
}

// shareStats returns max/mean, min/mean and the squared relative deviations
// of the shares of r's nodes, each of which should own weight/total.
func shareStats(r *Ring) (maxRatio, minRatio float64, squares []float64) {
	shares := r.Ownership()
	var weights uint64
	for _, n := range r.nodes {
		weights += uint64(n.Weight)
	}
	maxRatio, minRatio = 0, math.Inf(1)
	sum := 0.0
	for _, n := range r.nodes { // ordered by ID, so sum is deterministic
		ratio := shares[n.ID] * float64(weights) / float64(n.Weight)
		maxRatio, minRatio = max(maxRatio, ratio), min(minRatio, ratio)
		squares = append(squares, (ratio-1)*(ratio-1))
		sum += shares[n.ID]
	}
	if math.Abs(sum-1) > 1e-9 {
		panic(fmt.Sprintf("ownership sums to %v, not 1", sum))
	}
	return maxRatio, minRatio, squares
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

// TestBalanceEqualNodes measures how evenly 16 equal nodes share the ring.
//
// With independent random tokens, a node's share is a sum of V arcs, and its
// relative spread (coefficient of variation, CV) is 1/sqrt(V): 0.088 for the
// default V = 128. The largest of 16 such shares is then about 1 + 1.77 CV
// = 1.156 times the mean on average, and more than 1.2 for about one
// membership in four (measured over 1000 random memberships: median 1.155,
// 90th percentile 1.22, worst 1.34). So no bound near 1.15 holds for every
// membership at V = 128; what can be checked is that tokens are as good as
// independent random ones (CV at its theoretical value, no worse), that the
// typical maximum is where theory puts it, and a pinned membership. Bringing
// max/mean under 1.1 takes V = 512 or more (CV 0.044) or token placement
// that depends on the whole membership.
func TestBalanceEqualNodes(t *testing.T) {
	pinned := mustNew(t, Config{}, 1, numberedNodes("node-", 16, 1))
	maxRatio, minRatio, _ := shareStats(pinned)
	t.Logf("node-00..node-15, 128 tokens each: max/mean %.4f, min/mean %.4f", maxRatio, minRatio)
	// Measured 1.1937 and 0.8394: a membership on the uneven side (1.8 and
	// 2.2 CV from the mean). Deterministic, so these bounds cannot flake.
	if maxRatio > 1.20 || minRatio < 0.82 {
		t.Errorf("pinned membership: max/mean %.4f (bound 1.20), min/mean %.4f (bound 0.82)", maxRatio, minRatio)
	}

	for _, v := range []uint32{32, 128} {
		rng := rand.New(rand.NewPCG(0x7e57, uint64(v))) // fixed: see the file comment
		var maxRatios, squares []float64
		for range 40 {
			r := mustNew(t, Config{VirtualNodesPerWeight: v}, 1, randomNodes(rng, 16))
			m, _, sq := shareStats(r)
			maxRatios = append(maxRatios, m)
			squares = append(squares, sq...)
		}
		mean := 0.0
		for _, s := range squares {
			mean += s / float64(len(squares))
		}
		cv, theory := math.Sqrt(mean), 1/math.Sqrt(float64(v))
		expectedMax := 1 + 1.766*theory // mean of the largest of 16 standard normals is 1.766
		t.Logf("V=%d, 40 random memberships of 16: CV %.4f (theory %.4f), median max/mean %.4f (theory %.4f), worst %.4f",
			v, cv, theory, median(maxRatios), expectedMax, slices.Max(maxRatios))
		// 640 shares estimate CV to about 3%: these bounds are 5 sigma.
		if cv < 0.85*theory || cv > 1.15*theory {
			t.Errorf("V=%d: CV %.4f outside [0.85, 1.15] × %.4f: tokens are not spread like independent uniform points", v, cv, theory)
		}
		if m := median(maxRatios); m > 1+1.766*theory*1.15 {
			t.Errorf("V=%d: median max/mean %.4f above %.4f", v, m, 1+1.766*theory*1.15)
		}
	}
}

// TestBalanceWeighted checks that weights 1:2:4 give shares 1/7, 2/7, 4/7:
// within 8% on a pinned membership (measured: 0.950, 1.054, 0.986 of the
// expected share), and within 3% on average over 100 random memberships
// (measured 1.023, 0.997, 0.996). The standard error of that mean is 0.8%
// for weight 1 and less for the others, so 3% is over 3.5 sigma; over 100
// seeds the largest deviation seen was 2.3%, at the seed used here.
func TestBalanceWeighted(t *testing.T) {
	weights := []uint32{1, 2, 4}
	pinned := mustNew(t, Config{}, 1, []Node{{ID: "a", Weight: 1}, {ID: "b", Weight: 2}, {ID: "c", Weight: 4}})
	shares := pinned.Ownership()
	for i, id := range []NodeID{"a", "b", "c"} {
		ratio := shares[id] * 7 / float64(weights[i])
		t.Logf("pinned: %s weight %d owns %.4f, %.4f of its expected %d/7", id, weights[i], shares[id], ratio, weights[i])
		if math.Abs(ratio-1) > 0.08 {
			t.Errorf("pinned: %s owns %.4f of its expected share, outside 1 ± 0.08", id, ratio)
		}
	}

	rng := rand.New(rand.NewPCG(0x3e1, 0x9)) // fixed: see the file comment
	const rings = 100
	var mean [3]float64
	for range rings {
		nodes := randomNodes(rng, 3)
		for i := range nodes {
			nodes[i].Weight = weights[i]
		}
		shares := mustNew(t, Config{}, 1, nodes).Ownership()
		for i, n := range nodes {
			mean[i] += shares[n.ID] * 7 / float64(n.Weight) / rings
		}
	}
	t.Logf("mean over %d random memberships, share / expected share by weight 1, 2, 4: %.4f %.4f %.4f", rings, mean[0], mean[1], mean[2])
	for i, m := range mean {
		if math.Abs(m-1) > 0.03 {
			t.Errorf("weight %d: mean share %.4f of expected, outside 1 ± 0.03", weights[i], m)
		}
	}
}

// checkMove compares the replica lists of every sample placement on from
// and to (rf each) and calls check(before, after) on every pair.
func checkMove(t *testing.T, from, to *Ring, sample []Placement, rf int, check func(before, after []NodeID) error) {
	t.Helper()
	for _, p := range sample {
		before, err := from.Replicas(p.Seed, p.Key, p.Chunk, rf)
		if err != nil {
			t.Fatal(err)
		}
		after, err := to.Replicas(p.Seed, p.Key, p.Chunk, rf)
		if err != nil {
			t.Fatal(err)
		}
		if err := check(before, after); err != nil {
			t.Fatalf("%+v rf %d: %q -> %q: %v", p, rf, before, after, err)
		}
	}
}

// without returns ids with id removed.
func without(ids []NodeID, id NodeID) []NodeID {
	return slices.DeleteFunc(slices.Clone(ids), func(x NodeID) bool { return x == id })
}

// joined checks the effect of node gaining tokens (joining, or a higher
// weight): it may enter the list or move up anywhere; the other entries keep
// their order and only the last can fall off.
func joined(node NodeID) func(before, after []NodeID) error {
	return func(before, after []NodeID) error {
		rest, old := without(after, node), without(before, node)
		if len(rest) > len(old) || !slices.Equal(rest, old[:len(rest)]) {
			return fmt.Errorf("without %s the new list is not a prefix of the old one", node)
		}
		return nil
	}
}

// moveTolerance is four standard errors of a fraction p estimated from n
// samples.
func moveTolerance(p float64, n int) float64 { return 4 * math.Sqrt(p*(1-p)/float64(n)) }

// TestMinimalMovementJoin adds a 17th node to 16: about 1/17 of placements
// change primary, all of them to the new node, and no replica moves
// anywhere but to the new node. The fraction moved is the new node's
// ownership, up to sampling error; over 200 random memberships it ranged
// from 0.75/17 to 1.22/17, so [0.7/17, 1.3/17] holds for any sane ring.
func TestMinimalMovementJoin(t *testing.T) {
	rng := newRand(t)
	nodes := numberedNodes("node-", 17, 1)
	from := mustNew(t, Config{}, 1, nodes[:16])
	to := mustNew(t, Config{}, 2, nodes)
	const samples = 20000
	sample := randomPlacements(rng, samples)

	// With rf 3 this also checks rf 1: a primary that changes is the new node.
	checkMove(t, from, to, sample, 3, joined("node-16"))

	owned := to.Ownership()["node-16"]
	for _, rf := range []int{1, 3} {
		m, err := Compare(from, to, sample, rf)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("rf %d: %+v; primaries moved %.4f (1/17 = %.4f), copies moved %.4f, new node owns %.4f",
			rf, m, m.PrimaryMovedFraction(), 1.0/17, m.CopiesMovedFraction(), owned)
		if f := m.PrimaryMovedFraction(); f < 0.7/17 || f > 1.3/17 {
			t.Errorf("rf %d: %.4f of primaries moved, outside [0.7/17, 1.3/17]", rf, f)
		}
		if f := m.PrimaryMovedFraction(); math.Abs(f-owned) > moveTolerance(owned, samples) {
			t.Errorf("rf %d: %.4f of primaries moved, but the new node owns %.4f", rf, f, owned)
		}
		// Each placement gains at most one copy, the one on the new node.
		if m.CopiesMoved != m.SetChanged {
			t.Errorf("rf %d: %d copies moved for %d changed sets; each should gain one", rf, m.CopiesMoved, m.SetChanged)
		}
	}

	// The same structure on random memberships and a joining node of weight 2.
	for range 3 {
		base := randomNodes(rng, 2+rng.IntN(12))
		newcomer := Node{ID: "newcomer", Weight: 2}
		from := mustNew(t, Config{}, 1, base)
		to := mustNew(t, Config{}, 2, append(slices.Clone(base), newcomer))
		checkMove(t, from, to, sample[:2000], min(3, len(base)), joined(newcomer.ID))
	}
}

// TestMinimalMovementLeave removes a node from 16: placements that did not
// use it keep their exact replica list; those that did lose it, keep the
// others in order and gain one node at the end.
func TestMinimalMovementLeave(t *testing.T) {
	rng := newRand(t)
	nodes := numberedNodes("node-", 16, 1)
	const gone = NodeID("node-05")
	from := mustNew(t, Config{}, 1, nodes)
	to := mustNew(t, Config{}, 2, withoutNode(nodes, gone))
	const samples = 20000
	sample := randomPlacements(rng, samples)
	{ // rf 3, which also covers rf 1: the primary is the first replica
		checkMove(t, from, to, sample, 3, func(before, after []NodeID) error {
			if !slices.Contains(before, gone) {
				if !slices.Equal(before, after) {
					return errors.New("moved, but did not use the departed node")
				}
				return nil
			}
			rest := without(before, gone)
			if !slices.Equal(after[:len(rest)], rest) || slices.Contains(after, gone) {
				return errors.New("the surviving replicas did not stay in order")
			}
			return nil
		})
	}
	m, err := Compare(from, to, sample, 1)
	if err != nil {
		t.Fatal(err)
	}
	owned := from.Ownership()[gone]
	t.Logf("primaries moved %.4f; %s owned %.4f", m.PrimaryMovedFraction(), gone, owned)
	if f := m.PrimaryMovedFraction(); math.Abs(f-owned) > moveTolerance(owned, samples) {
		t.Errorf("%.4f of primaries moved, but the departed node owned %.4f", f, owned)
	}
}

func withoutNode(nodes []Node, id NodeID) []Node {
	return slices.DeleteFunc(slices.Clone(nodes), func(n Node) bool { return n.ID == id })
}

// TestWeightIncreaseOnlyGains doubles one node's weight: its old tokens stay,
// so placements only move to it.
func TestWeightIncreaseOnlyGains(t *testing.T) {
	rng := newRand(t)
	nodes := numberedNodes("node-", 8, 1)
	from := mustNew(t, Config{}, 1, nodes)
	nodes[2].Weight = 2
	to := mustNew(t, Config{}, 2, nodes)
	checkMove(t, from, to, randomPlacements(rng, 5000), 3, joined(nodes[2].ID))
	if a, b := from.Ownership()[nodes[2].ID], to.Ownership()[nodes[2].ID]; b <= a {
		t.Fatalf("doubling the weight took the share from %.4f to %.4f", a, b)
	}
}

func TestCompareIdentityAndEmpty(t *testing.T) {
	rng := newRand(t)
	r := mustNew(t, Config{}, 1, numberedNodes("n", 5, 1))
	m, err := Compare(r, r, randomPlacements(rng, 1000), 3)
	if err != nil || m.PrimaryMoved != 0 || m.SetChanged != 0 || m.CopiesMoved != 0 {
		t.Fatalf("Compare(r, r) = %+v, %v; want no movement", m, err)
	}
	m, err = Compare(r, r, nil, 1)
	if err != nil || m.PrimaryMovedFraction() != 0 || m.CopiesMovedFraction() != 0 {
		t.Fatalf("Compare on an empty sample = %+v, %v; want zero fractions", m, err)
	}
}

func TestReadTarget(t *testing.T) {
	vms := []NodeID{"c", "a", "b"}
	for _, tc := range []struct {
		serving string
		want    NodeID
		ok      bool
	}{{"abc", "a", true}, {"bc", "b", true}, {"c", "c", true}, {"", "", false}} {
		got, ok := ReadTarget(vms, func(id NodeID) bool { return strings.Contains(tc.serving, string(id)) })
		if got != tc.want || ok != tc.ok {
			t.Errorf("serving %q: ReadTarget = %q, %v; want %q, %v", tc.serving, got, ok, tc.want, tc.ok)
		}
	}
	if vms[0] != "c" || vms[1] != "a" {
		t.Errorf("ReadTarget reordered its argument: %v", vms)
	}
}

func TestReplicasAtMatchesReplicas(t *testing.T) {
	r, err := New(Config{}, 1, []Node{{ID: "a", Weight: 1}, {ID: "b", Weight: 2}, {ID: "c", Weight: 1}})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 500 {
		key := fmt.Sprintf("k%d", i)
		want, _ := r.Replicas(3, key, 1, 2)
		got, err := r.ReplicasAt(Position(3, key, 1), 2)
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("%s: ReplicasAt %v %v, Replicas %v", key, got, err, want)
		}
	}
	if _, err := r.ReplicasAt(0, 4); !errors.Is(err, ErrTooFewNodes) {
		t.Fatalf("rf 4 of 3 nodes: %v", err)
	}
}
