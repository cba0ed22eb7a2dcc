package main

import (
	"strings"
	"testing"
)

// go test -json -v output of a parent test with two subtests (one logging
// a figure over two lines and a |, one skipped), a test without logs, a
// failed test (which says why its package failed), and a package that
// failed to build; another package's test runs among them.
const testJSON = `{"Action":"start","Package":"m/ratelimit"}
{"Action":"run","Package":"m/ratelimit","Test":"TestClusterFailover"}
{"Action":"output","Package":"m/ratelimit","Test":"TestClusterFailover","Output":"=== RUN   TestClusterFailover\n"}
{"Action":"run","Package":"m/ratelimit","Test":"TestClusterFailover/token-bucket"}
{"Action":"output","Package":"m/ratelimit","Test":"TestClusterFailover/token-bucket","Output":"=== RUN   TestClusterFailover/token-bucket\n"}
{"Action":"output","Package":"m/ratelimit","Test":"TestClusterFailover/token-bucket","Output":"    redis_cluster_test.go:166: token-bucket: 1000 requests, 984 admitted | bound 1002\n"}
{"Action":"output","Package":"m/ratelimit","Test":"TestClusterFailover/token-bucket","Output":"    redis_cluster_test.go:181: decisions during a failover: 1000 decisions,\n"}
{"Action":"output","Package":"m/ratelimit","Test":"TestClusterFailover/token-bucket","Output":"        longest 51ms\n"}
{"Action":"run","Package":"m/ratelimit","Test":"TestClusterFailover/sliding-log"}
{"Action":"output","Package":"m/ratelimit","Test":"TestClusterFailover/sliding-log","Output":"    redis_cluster_test.go:40: no cluster\n"}
{"Action":"output","Package":"m/ratelimit","Test":"TestClusterFailover","Output":"--- PASS: TestClusterFailover (7.50s)\n"}
{"Action":"output","Package":"m/ratelimit","Test":"TestClusterFailover/token-bucket","Output":"    --- PASS: TestClusterFailover/token-bucket (7.25s)\n"}
{"Action":"pass","Package":"m/ratelimit","Test":"TestClusterFailover/token-bucket","Elapsed":7.25}
{"Action":"output","Package":"m/ratelimit","Test":"TestClusterFailover/sliding-log","Output":"    --- SKIP: TestClusterFailover/sliding-log (0.00s)\n"}
{"Action":"skip","Package":"m/ratelimit","Test":"TestClusterFailover/sliding-log","Elapsed":0}
{"Action":"pass","Package":"m/ratelimit","Test":"TestClusterFailover","Elapsed":7.5}
{"Action":"run","Package":"m/concurrency","Test":"TestClusterFailover"}
{"Action":"output","Package":"m/concurrency","Test":"TestClusterFailover","Output":"    redis_cluster_test.go:164: 20 in flight\n"}
{"Action":"pass","Package":"m/concurrency","Test":"TestClusterFailover","Elapsed":15}
{"Action":"run","Package":"m/ratelimit","Test":"TestRedisFaultLostReplyChargesOnce"}
{"Action":"output","Package":"m/ratelimit","Test":"TestRedisFaultLostReplyChargesOnce","Output":"--- PASS: TestRedisFaultLostReplyChargesOnce (0.12s)\n"}
{"Action":"pass","Package":"m/ratelimit","Test":"TestRedisFaultLostReplyChargesOnce","Elapsed":0.12}
{"Action":"run","Package":"m/ratelimit","Test":"TestClusterReshard"}
{"Action":"output","Package":"m/ratelimit","Test":"TestClusterReshard","Output":"    redis_cluster_test.go:230: 99 admitted, want 100\n"}
{"Action":"output","Package":"m/ratelimit","Test":"TestClusterReshard","Output":"--- FAIL: TestClusterReshard (1.50s)\n"}
{"Action":"fail","Package":"m/ratelimit","Test":"TestClusterReshard","Elapsed":1.5}
{"Action":"output","Package":"m/ratelimit","Output":"FAIL\n"}
{"Action":"fail","Package":"m/ratelimit","Elapsed":9.2}
{"ImportPath":"m/fleet [m/fleet.test]","Action":"build-output","Output":"fleet/x_test.go:3:1: syntax error\n"}
{"ImportPath":"m/fleet [m/fleet.test]","Action":"build-fail"}
{"Action":"start","Package":"m/fleet"}
{"Action":"output","Package":"m/fleet","Output":"FAIL\tm/fleet [build failed]\n"}
{"Action":"fail","Package":"m/fleet","Elapsed":0,"FailedBuild":"m/fleet [m/fleet.test]"}
`

func TestTests(t *testing.T) {
	var b strings.Builder
	if err := writeTests(&b, []byte(testJSON), "m/"); err != nil {
		t.Fatal(err)
	}
	want := "| test | result | figures it logged |\n|---|---|---|\n" +
		"| ratelimit `TestClusterFailover/token-bucket` | pass (7.25s) | token-bucket: 1000 requests, 984 admitted \\| bound 1002<br>decisions during a failover: 1000 decisions, longest 51ms |\n" +
		"| ratelimit `TestClusterFailover/sliding-log` | skip | no cluster |\n" +
		"| ratelimit `TestRedisFaultLostReplyChargesOnce` | pass (120ms) |  |\n" +
		"| ratelimit `TestClusterReshard` | **FAIL** (1.5s) | 99 admitted, want 100 |\n" +
		"| concurrency `TestClusterFailover` | pass (15s) | 20 in flight |\n" +
		"| fleet (package) | **FAIL** | FAIL m/fleet [build failed] |\n"
	if got := b.String(); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
}

func TestTestsRefusesWhatIsNotGoTestJSON(t *testing.T) {
	for _, in := range []string{"", "ok  \tm/ratelimit\t1.2s\n", "{not json\n"} {
		var b strings.Builder
		if err := writeTests(&b, []byte(in), ""); err == nil {
			t.Errorf("%q: no error", in)
		}
	}
}

// benchstat -format csv of two runs' worth of three benchmarks: one
// block per unit, a geomean row each, intervals where the runs vary.
const benchCSV = `goos: linux
pkg: m/ratelimit
,raw,
,sec/op,CI
RedisExact/token-bucket/1key-2,4.2364e-05,2%
RedisBatched/fixed-window/1key-2,1.024e-06,0%
RedisDenied/cache-2,5.85e-08,∞
geomean,1.36e-06,

,raw,
,trips/op,CI
RedisExact/token-bucket/1key-2,1.002,0%
RedisBatched/fixed-window/1key-2,0.0099,1%
RedisDenied/cache-2,0,?
geomean,,

,raw,
,B/op,CI
RedisExact/token-bucket/1key-2,605,0%
RedisBatched/fixed-window/1key-2,0,0%
RedisDenied/cache-2,0,0%
geomean,,

,raw,
,allocs/op,CI
RedisExact/token-bucket/1key-2,11,0%
RedisBatched/fixed-window/1key-2,0,0%
RedisDenied/cache-2,0,0%
geomean,,
`

func TestBenchstat(t *testing.T) {
	var b strings.Builder
	if err := writeBenchstat(&b, []byte(benchCSV)); err != nil {
		t.Fatal(err)
	}
	want := "| benchmark | time/op | trips/op | B/op | allocs/op |\n|---|---|---|---|---|\n" +
		"| RedisExact/token-bucket/1key | 42.4 µs ±2% | 1.002 | 605 | 11 |\n" +
		"| RedisBatched/fixed-window/1key | 1.02 µs | 0.0099 ±1% | 0 | 0 |\n" +
		"| RedisDenied/cache | 58.5 ns ±∞ | 0 | 0 | 0 |\n"
	if got := b.String(); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	if err := writeBenchstat(&b, []byte("goos: linux\n")); err == nil {
		t.Error("a CSV without benchmarks: no error")
	}
}
