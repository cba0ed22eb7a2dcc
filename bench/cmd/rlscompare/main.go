// Command rlscompare sends envoyproxy/ratelimit and loadshed serve the same
// ShouldRateLimit requests, from one gRPC client, over the rules of
// bench/rls/config, and reports (1) whether their answers agree, request
// by request, and (2) decisions per second and latency of each under the
// same closed-loop load. bench/rls-compare.sh starts both services on one
// redis-server and runs it; docs/benchmarks.md has the results.
//
//	rlscompare -envoy 127.0.0.1:18081 -loadshed 127.0.0.1:28081 [-batched 127.0.0.1:38081] -redis 127.0.0.1:6379
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rlpb "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/loadshed/loadshed/internal/procstat"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func main() {
	envoyAddr := flag.String("envoy", "", "envoyproxy/ratelimit's gRPC address")
	loadshedAddr := flag.String("loadshed", "", "loadshed serve's gRPC address (exact mode)")
	batchedAddr := flag.String("batched", "", "loadshed serve's gRPC address in batched mode (optional)")
	unpipedAddr := flag.String("unpipelined", "", "loadshed serve's gRPC address in exact mode with -pipeline 0 (optional)")
	batched2Addr := flag.String("batched2", "", "a second loadshed serve in batched mode on the same Redis, for the overshoot check (optional)")
	memoryAddr := flag.String("memory", "", "loadshed serve's gRPC address with counts in memory: the gRPC path's own bound on this machine (optional)")
	redisAddr := flag.String("redis", "", "the redis-server both use, for its CPU per decision (optional)")
	envoyMD := flag.String("envoy-metadata", "", "envoyproxy/ratelimit's gRPC address with RESPONSE_DYNAMIC_METADATA=true, for the dynamic_metadata check (optional)")
	loadshedMD := flag.String("loadshed-metadata", "", "loadshed serve's gRPC address with -response-dynamic-metadata (optional)")
	current := flag.String("current", "", "the domain of bench/rls/current's rules, served by both: a quarter of the agreement checks' requests go there (optional; only envoyproxy/ratelimit's current source reads those rules)")
	steps := flag.Int("steps", 2000, "requests in the agreement check")
	seed := flag.Uint64("seed", 1, "the agreement sequence's seed")
	dur := flag.Duration("load", 10*time.Second, "each service's load run (0: none)")
	conc := flag.Int("c", 64, "concurrent requests in flight in the load run")
	clients := flag.Int("clients", 1000, "distinct client values in the load run (100 a second each)")
	pids := flag.String("pids", "", "the services' process ids, comma-separated in the order envoy, loadshed, unpipelined, batched, memory: their CPU per decision (optional, Linux)")
	flag.Parse()
	if *envoyAddr == "" || *loadshedAddr == "" {
		flag.Usage()
		os.Exit(2)
	}
	envoy, ls := dial(*envoyAddr), dial(*loadshedAddr)
	run := strconv.FormatInt(time.Now().UnixNano(), 36) // fresh counts each run

	fmt.Printf("## Agreement: %d requests, seed %d, unit hits\n\n", *steps, *seed)
	agree(envoy, ls, sequence(run+"u", *steps, *seed, false, *current))
	fmt.Printf("\n## Agreement: %d requests, seed %d, with hits_addend 0, 2 and 3\n\n", *steps, *seed)
	agree(envoy, ls, sequence(run+"h", *steps, *seed, true, *current))
	if *envoyMD != "" && *loadshedMD != "" {
		fmt.Printf("\n## Agreement of dynamic_metadata: %d requests, seed %d, hits_addend as above (RESPONSE_DYNAMIC_METADATA, -response-dynamic-metadata)\n\n", *steps, *seed)
		agreeMetadata(dial(*envoyMD), dial(*loadshedMD), sequence(run+"m", *steps, *seed, true, *current))
	}

	if *batchedAddr != "" && *batched2Addr != "" {
		fmt.Printf("\n## Overshoot: 300 requests on one key of 100 an hour, alternating between two instances\n\n")
		fmt.Println("| service | admitted | bound |")
		fmt.Println("|---|---|---|")
		overshoot("envoyproxy/ratelimit", run+"e", envoy, envoy, "100")
		overshoot("loadshed serve, exact (two requests to one instance each)", run+"x", ls, ls, "100")
		overshoot("loadshed serve, batched, two instances", run+"b", dial(*batchedAddr), dial(*batched2Addr), "100 + 2 × (10 − 1) = 118")
	}
	if *dur <= 0 {
		return
	}
	var rc *redis.Client
	if *redisAddr != "" {
		rc = redis.NewClient(&redis.Options{Addr: *redisAddr})
		defer rc.Close()
	}
	fmt.Printf("\n## Load: %d in flight, %v each, %d clients at 100/s each\n\n", *conc, *dur, *clients)
	fmt.Println("| service | decisions/s | p50 | p99 | p99.9 | over-limit share | service CPU µs/decision | Redis CPU µs/decision | service + Redis CPU busy | load generator CPU busy |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|")
	type target struct {
		name string
		c    pb.RateLimitServiceClient
	}
	targets := []target{{"envoyproxy/ratelimit", envoy}, {"loadshed serve (exact)", ls}}
	for _, o := range []struct{ name, addr string }{
		{"loadshed serve (exact, -pipeline 0)", *unpipedAddr},
		{"loadshed serve (batched)", *batchedAddr},
		{"loadshed serve (memory, no Redis)", *memoryAddr},
	} {
		if o.addr != "" {
			targets = append(targets, target{o.name, dial(o.addr)})
		}
	}
	pidList := strings.Split(*pids, ",")
	for i, t := range targets {
		pid := ""
		if i < len(pidList) {
			pid = pidList[i]
		}
		load(t.name, t.c, rc, pid, run+strconv.Itoa(i), *dur, *conc, *clients)
	}
}

func dial(addr string) pb.RateLimitServiceClient {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	return pb.NewRateLimitServiceClient(conn)
}

func desc(kvs ...string) *rlpb.RateLimitDescriptor {
	d := &rlpb.RateLimitDescriptor{}
	for i := 0; i+1 < len(kvs); i += 2 {
		d.Entries = append(d.Entries, &rlpb.RateLimitDescriptor_Entry{Key: kvs[i], Value: kvs[i+1]})
	}
	return d
}

// sequence is the agreement check's requests: one to three descriptors
// drawn from the rules' shapes, over a few values each so that limits are
// reached; with hits, some requests weigh 2 or 3 and some descriptors 0.
// With a current domain, a quarter of the requests go to it, drawn from
// bench/rls/current's shapes.
func sequence(run string, n int, seed uint64, hits bool, current string) []*pb.RateLimitRequest {
	r := rand.New(rand.NewPCG(seed, 7))
	user := func() string { return run + "-u" + strconv.Itoa(r.IntN(12)) }
	shapes := []func() *rlpb.RateLimitDescriptor{
		func() *rlpb.RateLimitDescriptor { return desc("user", user()) },
		func() *rlpb.RateLimitDescriptor { return desc("path", "/v1/charges", "user", user()) },
		func() *rlpb.RateLimitDescriptor { return desc("path", "/v1/other", "user", user()) },
		func() *rlpb.RateLimitDescriptor {
			return desc("report", "monthly-"+run+"-"+strconv.Itoa(r.IntN(4)))
		},
		func() *rlpb.RateLimitDescriptor { return desc("files", "files/"+run+"-"+strconv.Itoa(r.IntN(5))) },
		func() *rlpb.RateLimitDescriptor { return desc("logs", "logs/"+run+"-"+strconv.Itoa(r.IntN(3))) },
		func() *rlpb.RateLimitDescriptor { return desc("east", user()) },
		func() *rlpb.RateLimitDescriptor { return desc("west", user()) },
		func() *rlpb.RateLimitDescriptor { return desc("tenant", run+"-t"+strconv.Itoa(r.IntN(3))) },
		func() *rlpb.RateLimitDescriptor { return desc("plan", "free") },
		func() *rlpb.RateLimitDescriptor { return desc("plan", "gold") },
		func() *rlpb.RateLimitDescriptor { return desc("health", "x") },
		func() *rlpb.RateLimitDescriptor { return desc("nothing", "here") },
	}
	currentShapes := []func() *rlpb.RateLimitDescriptor{
		func() *rlpb.RateLimitDescriptor {
			return desc("route", "/v1/"+run+"-"+strconv.Itoa(r.IntN(4))+"/reports")
		},
		// Not a report: the pattern's end does not match.
		func() *rlpb.RateLimitDescriptor { return desc("route", "/v1/"+run+"/reports.json") },
		func() *rlpb.RateLimitDescriptor {
			return desc("route", "/v"+strconv.Itoa(1+r.IntN(2))+"/exports/"+run+"-"+strconv.Itoa(r.IntN(5))+".csv")
		},
		func() *rlpb.RateLimitDescriptor { return desc("user", user()) },
		func() *rlpb.RateLimitDescriptor {
			return desc("tenant", run+"-t"+strconv.Itoa(r.IntN(3))+"-eu", "user", user())
		},
		func() *rlpb.RateLimitDescriptor {
			return desc("tenant", run+"-t"+strconv.Itoa(r.IntN(3))+"-us", "user", user())
		},
		func() *rlpb.RateLimitDescriptor { return desc("east", user()) },
		func() *rlpb.RateLimitDescriptor { return desc("west", user()) },
		func() *rlpb.RateLimitDescriptor { return desc("canary", run) },
		func() *rlpb.RateLimitDescriptor { return desc("health", "x") },
	}
	// The plans' counts are shared by both sequences of a run (their values
	// are the rules'); the script's redis-server is fresh each run.
	out := make([]*pb.RateLimitRequest, n)
	for i := range out {
		req := &pb.RateLimitRequest{Domain: "bench"}
		shapes := shapes
		if current != "" && r.IntN(4) == 0 {
			req.Domain, shapes = current, currentShapes
		}
		if r.IntN(5) == 0 {
			// Both quotas of one user: the request passes while either
			// has room.
			u := user()
			req.Descriptors = append(req.Descriptors, desc("east", u), desc("west", u))
		}
		for range 1 + r.IntN(3) {
			d := shapes[r.IntN(len(shapes))]()
			if hits && r.IntN(8) == 0 {
				d.HitsAddend = wrapperspb.UInt64(uint64(r.IntN(3)))
			}
			req.Descriptors = append(req.Descriptors, d)
		}
		if hits && r.IntN(6) == 0 {
			req.HitsAddend = uint32(2 + r.IntN(2))
		}
		out[i] = req
	}
	return out
}

type answer struct {
	code      pb.RateLimitResponse_Code
	remaining uint32
	reset     int64
	limit     uint32
}

func answers(r *pb.RateLimitResponse) (pb.RateLimitResponse_Code, []answer) {
	out := make([]answer, len(r.Statuses))
	for i, s := range r.Statuses {
		out[i] = answer{s.Code, s.LimitRemaining, s.GetDurationUntilReset().GetSeconds(), s.GetCurrentLimit().GetRequestsPerUnit()}
	}
	return r.OverallCode, out
}

// quota reports whether a descriptor is one of the rules' quotas.
func quota(d *rlpb.RateLimitDescriptor) bool {
	k := d.GetEntries()[0].GetKey()
	return len(d.Entries) == 1 && (k == "east" || k == "west")
}

// olderQuota is loadshed's answer as envoyproxy/ratelimit's versions from
// before March 2026 give it (rls's package doc): a quota that is over
// says OK, without duration_until_reset, and only the other descriptors
// decide the overall code.
func olderQuota(req *pb.RateLimitRequest, as []answer) (pb.RateLimitResponse_Code, []answer) {
	out := slices.Clone(as)
	code := pb.RateLimitResponse_OK
	for i, a := range out {
		if quota(req.Descriptors[i]) && a.code == pb.RateLimitResponse_OVER_LIMIT {
			out[i].code, out[i].reset = pb.RateLimitResponse_OK, 0
		}
		if out[i].code == pb.RateLimitResponse_OVER_LIMIT {
			code = pb.RateLimitResponse_OVER_LIMIT
		}
	}
	return code, out
}

// sameAnswer reports whether two answers are equal, and if not whether
// they differ only by a second of duration_until_reset: the two clocks
// read whole seconds, and one may turn between the two calls.
func sameAnswer(ce pb.RateLimitResponse_Code, ae []answer, cl pb.RateLimitResponse_Code, al []answer) (same, ticked bool) {
	if ce == cl && slices.Equal(ae, al) {
		return true, false
	}
	ticked = ce == cl && len(ae) == len(al)
	for j := range ae {
		a, b := ae[j], al[j]
		a.reset, b.reset = 0, 0
		ticked = ticked && a == b && abs(ae[j].reset-al[j].reset) <= 1
	}
	return false, ticked
}

// countKey is the count a descriptor draws on: its domain and entries,
// with the pattern in place of a value that shares it (files/*,
// /v*/exports/*.csv).
func countKey(domain string, d *rlpb.RateLimitDescriptor) string {
	var b strings.Builder
	b.WriteString(domain + ":")
	for _, e := range d.Entries {
		v := e.Value
		if e.Key == "files" && strings.HasPrefix(v, "files/") {
			v = "files/*"
		}
		if e.Key == "route" && strings.HasPrefix(v, "/v") && strings.Contains(v, "/exports/") && strings.HasSuffix(v, ".csv") {
			v = "/v*/exports/*.csv"
		}
		b.WriteString(e.Key + "=" + v + ";")
	}
	return b.String()
}

func cost(req *pb.RateLimitRequest, d *rlpb.RateLimitDescriptor) uint64 {
	if d.HitsAddend != nil {
		return d.HitsAddend.Value
	}
	return max(1, uint64(req.HitsAddend))
}

// documented reports whether every descriptor where the two answers differ
// differs for one of the reasons rls's package doc states ("Differences
// from envoyproxy/ratelimit"): limit_remaining on OVER_LIMIT is what is
// still there, where envoyproxy/ratelimit says 0; a count that
// envoyproxy/ratelimit ran past the limit with rejected hits (diverged)
// answers otherwise from then on; a check (hits_addend 0) is over when
// nothing remains.
func documented(req *pb.RateLimitRequest, ae, al []answer, diverged map[string]bool) bool {
	if len(ae) != len(al) {
		return false
	}
	for j := range ae {
		a, b := ae[j], al[j]
		a.reset, b.reset = 0, 0
		if a == b && abs(ae[j].reset-al[j].reset) <= 1 {
			continue
		}
		d := req.Descriptors[j]
		over := pb.RateLimitResponse_OVER_LIMIT
		switch {
		case a.code == b.code && a.limit == b.limit && a.remaining == 0 && b.remaining > 0 && cost(req, d) > 1 && abs(ae[j].reset-al[j].reset) <= 1:
			// Over for this request's weight (in shadow mode, or a quota
			// answered the older way, still OK): envoyproxy/ratelimit says
			// 0 remain, loadshed what is still there.
		case diverged[countKey(req.Domain, d)]:
		case cost(req, d) == 0 && b.code == over && b.remaining == 0 && a.remaining == 0:
		default:
			return false
		}
	}
	return true
}

// classify says how two answers to req compare: "same", "tick" (a second
// of duration_until_reset apart), "quota" (the same but for the older
// quota answer), "documented" (differing for reasons the package doc
// states), or "" (otherwise).
func classify(req *pb.RateLimitRequest, ce pb.RateLimitResponse_Code, ae []answer, cl pb.RateLimitResponse_Code, al []answer, diverged map[string]bool) string {
	if eq, ticked := sameAnswer(ce, ae, cl, al); eq {
		return "same"
	} else if ticked {
		return "tick"
	}
	co, ao := olderQuota(req, al)
	if eq, ticked := sameAnswer(ce, ae, co, ao); eq || ticked {
		return "quota"
	}
	if documented(req, ae, al, diverged) || documented(req, ae, ao, diverged) {
		return "documented"
	}
	return ""
}

// track marks the counts that envoyproxy/ratelimit ran past loadshed's.
// It counts rejected hits, so a count it answered over for more than one
// unit runs ahead of loadshed's from then on. Over: OVER_LIMIT, a quota
// answered OK without a reset (the older quota answer), or none remaining
// where loadshed has some left (in shadow mode, answered OK).
func track(req *pb.RateLimitRequest, ae, al []answer, diverged map[string]bool) {
	for j, a := range ae {
		d := req.Descriptors[j]
		over := a.code == pb.RateLimitResponse_OVER_LIMIT || (quota(d) && a.limit > 0 && a.reset == 0) ||
			(a.limit > 0 && a.remaining == 0 && j < len(al) && al[j].remaining > 0)
		if over && cost(req, d) > 1 {
			diverged[countKey(req.Domain, d)] = true
		}
	}
}

func agree(envoy, ls pb.RateLimitServiceClient, reqs []*pb.RateLimitRequest) {
	ctx := context.Background()
	same, tick, older, doc := 0, 0, 0, 0
	diverged := map[string]bool{}
	var diffs []string
	for i, req := range reqs {
		re, rl := askBoth(ctx, envoy, ls, i, req)
		ce, ae := answers(re)
		cl, al := answers(rl)
		kind := classify(req, ce, ae, cl, al, diverged)
		track(req, ae, al, diverged)
		switch kind {
		case "same":
			same++
			continue
		case "tick":
			tick++
			continue
		case "quota":
			older++
			continue
		case "documented":
			doc++
			continue
		}
		diffs = append(diffs, fmt.Sprintf("| %d | %s | %v %v | %v %v |", i, show(req), ce, ae, cl, al))
	}
	fmt.Printf("%d of %d requests answered the same (code, and per descriptor: code, limit_remaining, duration_until_reset, requests_per_unit); %d more differ only by a second of duration_until_reset turning between the two calls; %d more differ only where a quota is over, answered as envoyproxy/ratelimit's versions before March 2026 answer it; %d more differ where a request weighs more than one unit or none, for the reasons rls's package doc states (limit_remaining on OVER_LIMIT, rejected hits counted, a check at the limit); %d differ otherwise:\n\n", same, len(reqs), tick, older, doc, len(diffs))
	fmt.Printf("agreement: %.1f%% the same, %.1f%% with a turning second, %.1f%% with the older quota answer, %.1f%% with the documented differences, %.1f%% unexplained\n\n",
		pct(same, len(reqs)), pct(same+tick, len(reqs)), pct(same+tick+older, len(reqs)), pct(same+tick+older+doc, len(reqs)), pct(len(diffs), len(reqs)))
	printDiffs(diffs, 40)
}

// askBoth sends request i to both services and returns their answers; an
// error from either ends the run.
func askBoth(ctx context.Context, envoy, ls pb.RateLimitServiceClient, i int, req *pb.RateLimitRequest) (re, rl *pb.RateLimitResponse) {
	re, err := envoy.ShouldRateLimit(ctx, req)
	if err != nil {
		fmt.Fprintf(os.Stderr, "envoyproxy/ratelimit, request %d: %v\n", i, err)
		os.Exit(1)
	}
	rl, err = ls.ShouldRateLimit(ctx, req)
	if err != nil {
		fmt.Fprintf(os.Stderr, "loadshed, request %d: %v\n", i, err)
		os.Exit(1)
	}
	return re, rl
}

// printDiffs prints the answers that differ unexplained as a table, the
// first most of them and a count of the rest.
func printDiffs(diffs []string, most int) {
	if len(diffs) == 0 {
		return
	}
	fmt.Println("| # | request | envoyproxy/ratelimit | loadshed |")
	fmt.Println("|---|---|---|---|")
	for i, d := range diffs {
		if i == most {
			fmt.Printf("| … | %d more | | |\n", len(diffs)-most)
			break
		}
		fmt.Println(d)
	}
}

func pct(n, of int) float64 { return 100 * float64(n) / float64(max(of, 1)) }

// agreeMetadata compares the responses' dynamic_metadata. Versions of
// envoyproxy/ratelimit before April 2026 add quotaModeEnabled and
// quotaModeViolations, which later ones dropped (rls's package doc): the
// check sets those two aside and counts the responses that have them.
// The rules' metadata goes with the descriptors that passed, so where a
// descriptor passed on one side only, for one of the documented reasons
// the statuses differ (classify), the metadata follows it: those are
// counted apart.
func agreeMetadata(envoy, ls pb.RateLimitServiceClient, reqs []*pb.RateLimitRequest) {
	ctx := context.Background()
	same, older, follows := 0, 0, 0
	diverged := map[string]bool{}
	var diffs []string
	for i, req := range reqs {
		re, rl := askBoth(ctx, envoy, ls, i, req)
		ce, ae := answers(re)
		cl, al := answers(rl)
		kind := classify(req, ce, ae, cl, al, diverged)
		track(req, ae, al, diverged)
		me, ml := proto.Clone(re.GetDynamicMetadata()).(*structpb.Struct), rl.GetDynamicMetadata()
		if me == nil {
			me = &structpb.Struct{}
		}
		_, v := me.Fields["quotaModeViolations"]
		_, e := me.Fields["quotaModeEnabled"]
		delete(me.Fields, "quotaModeViolations")
		delete(me.Fields, "quotaModeEnabled")
		je, jl := canonical(me), canonical(ml)
		switch {
		case je == jl && (v || e):
			older++
		case je == jl:
			same++
		case kind == "documented" && codesDiffer(ae, al):
			follows++
		default:
			diffs = append(diffs, fmt.Sprintf("| %d | %s | %s | %s |", i, show(req), je, jl))
		}
	}
	fmt.Printf("%d of %d responses carry the same dynamic_metadata; %d more the same but for quotaModeEnabled and quotaModeViolations, which envoyproxy/ratelimit's versions before April 2026 add (rls's package doc); %d more differ in the rules' metadata where a descriptor passed on one side only, for the reasons rls's package doc states (rejected hits counted, a check at the limit); %d differ otherwise:\n\n", same, len(reqs), older, follows, len(diffs))
	fmt.Printf("agreement: %.1f%% the same, %.1f%% with the older fields set aside, %.1f%% with the documented differences, %.1f%% unexplained\n\n", pct(same, len(reqs)), pct(same+older, len(reqs)), pct(same+older+follows, len(reqs)), pct(len(diffs), len(reqs)))
	printDiffs(diffs, 20)
}

// codesDiffer reports whether a descriptor's code differs between the two.
func codesDiffer(ae, al []answer) bool {
	for j := range min(len(ae), len(al)) {
		if ae[j].code != al[j].code {
			return true
		}
	}
	return false
}

// canonical is a Struct as JSON with sorted names.
func canonical(s *structpb.Struct) string {
	b, err := protojson.Marshal(s)
	if err != nil {
		return err.Error()
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return err.Error()
	}
	out, _ := json.Marshal(v)
	return string(out)
}

// overshoot sends 300 requests for one key, alternating between a and b,
// 16 at a time, and prints how many were admitted.
func overshoot(name, key string, a, b pb.RateLimitServiceClient, bound string) {
	var ok atomic.Int64
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i := range 300 {
		c := a
		if i%2 == 1 {
			c = b
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			r, err := c.ShouldRateLimit(context.Background(), &pb.RateLimitRequest{Domain: "bench", Descriptors: []*rlpb.RateLimitDescriptor{desc("overshoot", key)}})
			if err == nil && r.OverallCode == pb.RateLimitResponse_OK {
				ok.Add(1)
			}
		}()
	}
	wg.Wait()
	fmt.Printf("| %s | %d | %s |\n", name, ok.Load(), bound)
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

func show(req *pb.RateLimitRequest) string {
	var b strings.Builder
	if req.Domain != "bench" {
		b.WriteString(req.Domain + ": ")
	}
	if req.HitsAddend > 0 {
		fmt.Fprintf(&b, "hits %d: ", req.HitsAddend)
	}
	for i, d := range req.Descriptors {
		if i > 0 {
			b.WriteString(", ")
		}
		for j, e := range d.Entries {
			if j > 0 {
				b.WriteByte('/')
			}
			v := e.Value
			if k := strings.LastIndexByte(v, '-'); k >= 0 && strings.Contains(v, "-u") {
				v = v[k+1:]
			}
			b.WriteString(e.Key + "=" + v)
		}
		if d.HitsAddend != nil {
			fmt.Fprintf(&b, " (hits %d)", d.HitsAddend.Value)
		}
	}
	return b.String()
}

func redisCPU(rc *redis.Client) float64 {
	if rc == nil {
		return 0
	}
	info, err := rc.Info(context.Background(), "cpu").Result()
	if err != nil {
		return 0
	}
	var total float64
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			f, _ := strconv.ParseFloat(v, 64)
			total += f
		}
	}
	return total
}

// processCPU is a process's CPU time in seconds ("self": this one's), from
// /proc (0 elsewhere).
func processCPU(pid string) float64 {
	n, err := strconv.Atoi(pid)
	if pid == "self" {
		n, err = os.Getpid(), nil
	}
	if err != nil {
		return 0
	}
	d, _ := procstat.CPU(n)
	return d.Seconds()
}

func load(name string, c pb.RateLimitServiceClient, rc *redis.Client, pid, run string, dur time.Duration, conc, clients int) {
	ctx := context.Background()
	// Warm up: connections, scripts, the first keys.
	for i := range 200 {
		c.ShouldRateLimit(ctx, &pb.RateLimitRequest{Domain: "bench", Descriptors: []*rlpb.RateLimitDescriptor{desc("client", run+"w"+strconv.Itoa(i%clients))}})
	}
	cpu0, pcpu0, lcpu0 := redisCPU(rc), processCPU(pid), processCPU("self")
	var total, over atomic.Int64
	lat := make([][]time.Duration, conc)
	var wg sync.WaitGroup
	deadline := time.Now().Add(dur)
	for w := range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 11))
			ls := make([]time.Duration, 0, 1<<16)
			for time.Now().Before(deadline) {
				req := &pb.RateLimitRequest{Domain: "bench", Descriptors: []*rlpb.RateLimitDescriptor{desc("client", run+"-"+strconv.Itoa(r.IntN(clients)))}}
				t0 := time.Now()
				resp, err := c.ShouldRateLimit(ctx, req)
				ls = append(ls, time.Since(t0))
				if err != nil {
					continue
				}
				total.Add(1)
				if resp.OverallCode == pb.RateLimitResponse_OVER_LIMIT {
					over.Add(1)
				}
			}
			lat[w] = ls
		}()
	}
	wg.Wait()
	cpu, pcpu, lcpu := redisCPU(rc)-cpu0, processCPU(pid)-pcpu0, processCPU("self")-lcpu0
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	slices.Sort(all)
	q := func(p float64) time.Duration {
		if len(all) == 0 {
			return 0
		}
		return all[min(len(all)-1, int(p*float64(len(all))))].Round(time.Microsecond)
	}
	n := total.Load()
	perDecision, service := "-", "-"
	if rc != nil && n > 0 {
		perDecision = fmt.Sprintf("%.1f", cpu/float64(n)*1e6)
	}
	if pid != "" && n > 0 {
		service = fmt.Sprintf("%.1f", pcpu/float64(n)*1e6)
	}
	// The CPU the service and redis-server used, and the load generator's,
	// as shares of one CPU over the run: a row whose first is near 100 %
	// and second below it is bound by the server's CPU, not by the load.
	busy := "-"
	if pid != "" {
		busy = fmt.Sprintf("%.0f %%", 100*(pcpu+cpu)/dur.Seconds())
	}
	fmt.Printf("| %s | %.0f | %v | %v | %v | %.1f%% | %s | %s | %s | %.0f %% |\n", name, float64(n)/dur.Seconds(), q(0.5), q(0.99), q(0.999), 100*float64(over.Load())/float64(max(n, 1)), service, perDecision, busy, 100*lcpu/dur.Seconds())
}
