package config

import (
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/loadshed/loadshed/shed"
)

var update = flag.Bool("update", false, "rewrite the want lines of testdata/broken from what Parse reports")

// TestBrokenFiles parses every file of testdata/broken, whose first lines
// say, one "# want: LINE:COL: PATH: MESSAGE" each, every error it must
// report, and no other.
func TestBrokenFiles(t *testing.T) {
	files, _ := filepath.Glob("testdata/broken/*")
	if len(files) == 0 {
		t.Fatal("no files in testdata/broken")
	}
	for _, path := range files {
		t.Run(filepath.Base(path), func(t *testing.T) {
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			var wants []string
			var rest []string
			for _, line := range strings.SplitAfter(string(data), "\n") {
				if w, ok := strings.CutPrefix(line, "# want: "); ok {
					wants = append(wants, strings.TrimSuffix(w, "\n"))
					continue
				}
				rest = append(rest, line)
			}
			f, err := Parse(path, data, Options{})
			if f != nil || err == nil {
				t.Fatalf("Parse accepted a broken file: %+v", f)
			}
			var es Errors
			if !errors.As(err, &es) {
				t.Fatalf("error is %T, not Errors: %v", err, err)
			}
			var got []string
			for _, e := range es {
				if e.File != path {
					t.Errorf("error names file %q, want %q", e.File, path)
				}
				got = append(got, strings.TrimPrefix(e.Error(), path+":"))
			}
			if *update {
				var b strings.Builder
				for _, g := range got {
					b.WriteString("# want: " + g + "\n")
				}
				b.WriteString(strings.Join(rest, ""))
				if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			if len(got) != len(wants) {
				t.Errorf("got %d errors, want %d:\n%s", len(got), len(wants), strings.Join(got, "\n"))
			}
			for i := range min(len(got), len(wants)) {
				if got[i] != wants[i] {
					t.Errorf("error %d:\n got: %s\nwant: %s", i, got[i], wants[i])
				}
			}
		})
	}
}

func TestExampleFileParsesAndBuilds(t *testing.T) {
	opts := Options{Headroom: shed.HeadroomFunc(func() float64 { return 1 })}
	b, err := Load("../examples/loadshed.yaml", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var names []string
	for _, l := range b.Chain.Layers() {
		names = append(names, l.Name())
	}
	if want := []string{"ratelimit-shadow", "ratelimit", "concurrency", "fleet", "worker"}; !reflect.DeepEqual(names, want) {
		t.Errorf("layers %v, want %v", names, want)
	}
}

// TestExampleFileSetsEveryField keeps examples/loadshed.yaml complete: each
// field of the schema appears in it, set or in a comment.
func TestExampleFileSetsEveryField(t *testing.T) {
	data, err := os.ReadFile("../examples/loadshed.yaml")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[reflect.Type]bool{}
	var walk func(t reflect.Type)
	var missing []string
	walk = func(typ reflect.Type) {
		for typ.Kind() == reflect.Pointer || typ.Kind() == reflect.Slice || typ.Kind() == reflect.Map {
			typ = typ.Elem()
		}
		if typ.Kind() != reflect.Struct || seen[typ] || enums[typ] != nil || typ == durationType {
			return
		}
		seen[typ] = true
		fs := fieldsOf(typ)
		for _, name := range fs.names {
			if !strings.Contains(string(data), name+":") {
				missing = append(missing, typ.Name()+"."+name)
			}
			walk(typ.FieldByIndex(fs.index[name]).Type)
		}
	}
	walk(reflect.TypeFor[File]())
	if len(missing) > 0 {
		t.Errorf("examples/loadshed.yaml does not show %v", missing)
	}
}

const smallYAML = `
http:
  key: {from: header, header: X-API-Key}
  priorities:
    "POST /v1/charges": critical
layers:
  - ratelimit:
      domain: api
      descriptors:
        - key: key
          rate_limit: {unit: minute, requests_per_unit: 100, burst: 20}
  - concurrency: {limit: 8, per_key: 2}
`

const smallJSON = `{
  "http": {"key": {"from": "header", "header": "X-API-Key"},
           "priorities": {"POST /v1/charges": "critical"}},
  "layers": [
    {"ratelimit": {"domain": "api", "descriptors": [
      {"key": "key", "rate_limit": {"unit": "minute", "requests_per_unit": 100, "burst": 20}}]}},
    {"concurrency": {"limit": 8, "per_key": 2}}
  ]
}`

func TestJSONReadsAsYAML(t *testing.T) {
	y, err := Parse("a.yaml", []byte(smallYAML), Options{})
	if err != nil {
		t.Fatal(err)
	}
	j, err := Parse("a.json", []byte(smallJSON), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(y, j) {
		t.Errorf("YAML and JSON differ:\n%+v\n%+v", y, j)
	}
	if got := y.Layers[0].RateLimit.Descriptors[0].RateLimit.Burst; got != 20 {
		t.Errorf("burst %d, want 20", got)
	}
	if got := y.HTTP.Priorities["POST /v1/charges"]; got != shed.Critical {
		t.Errorf("priority %v, want critical", got)
	}
}

func TestAnchorsAndAliases(t *testing.T) {
	src := `
layers:
  - ratelimit:
      descriptors:
        - key: key
          rate_limit: &fast {unit: second, requests_per_unit: 5}
        - key: route
          rate_limit: *fast
`
	f, err := Parse("a.yaml", []byte(src), Options{})
	if err != nil {
		t.Fatal(err)
	}
	ds := f.Layers[0].RateLimit.Descriptors
	if *ds[0].RateLimit != *ds[1].RateLimit || ds[1].RateLimit.RequestsPerUnit != 5 {
		t.Errorf("alias not followed: %+v %+v", ds[0].RateLimit, ds[1].RateLimit)
	}
}

func TestAliasBombIsRefused(t *testing.T) {
	var b strings.Builder
	b.WriteString("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i < 12; i++ {
		b.WriteString("a" + string(rune('a'+i)) + ": &a" + string(rune('a'+i)) + " [")
		prev := "a0"
		if i > 1 {
			prev = "a" + string(rune('a'+i-1))
		}
		for j := 0; j < 10; j++ {
			if j > 0 {
				b.WriteString(", ")
			}
			b.WriteString("*" + prev)
		}
		b.WriteString("]\n")
	}
	b.WriteString("layers: [{concurrency: {limit: 1}}]\n")
	// Unknown top-level fields are not decoded, so the bomb must sit
	// where the decoder walks into it.
	src := strings.Replace(b.String(), "layers:", "http: {trusted_proxies: *a"+string(rune('a'+11))+"}\nlayers:", 1)
	_, err := Parse("bomb.yaml", []byte(src), Options{})
	if err == nil {
		t.Fatal("a file of nested aliases was accepted")
	}
}

func TestValidateAStructBuiltInGo(t *testing.T) {
	f := &File{Layers: []Layer{{Concurrency: &Concurrency{Limit: -1}}, {}}}
	err := Validate(f, Options{})
	var es Errors
	if !errors.As(err, &es) {
		t.Fatalf("want Errors, got %v", err)
	}
	got := err.Error()
	for _, want := range []string{
		"layers[0].concurrency.limit: must not be negative, got -1",
		"layers[1]: a layer needs one section (allowed: ratelimit, concurrency, fleet, worker)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("errors lack %q:\n%s", want, got)
		}
	}
	for _, e := range es {
		if e.File != "" || e.Line != 0 {
			t.Errorf("a struct has no file position, got %q", e.Error())
		}
	}
}

// FuzzParse feeds the parser and the validator anything: they must not
// panic, and a file Parse accepts must build.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("testdata/broken/*")
	files = append(files, "../examples/loadshed.yaml")
	for _, path := range files {
		data, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(smallYAML))
	f.Add([]byte(smallJSON))
	// In memory, so that no input makes the target dial Redis.
	opts := Options{Headroom: shed.HeadroomFunc(func() float64 { return 0.5 }), MemoryOnly: true}
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := Parse("fuzz.yaml", data, opts)
		if err != nil {
			if file != nil {
				t.Fatal("Parse returned a file and an error")
			}
			var es Errors
			if !errors.As(err, &es) || len(es) == 0 {
				t.Fatalf("Parse's error is not Errors: %v", err)
			}
			return
		}
		b, err := Build(file, opts)
		if err != nil {
			t.Fatalf("Parse accepted a file Build refuses: %v\n%s", err, data)
		}
		b.Close()
	})
}

func TestValidateRefusesNegativeDurations(t *testing.T) {
	f := &File{Layers: []Layer{{Concurrency: &Concurrency{Limit: 1, RetryAfter: -1}}}}
	err := Validate(f, Options{})
	if err == nil || !strings.Contains(err.Error(), "layers[0].concurrency.retry_after: must not be negative") {
		t.Errorf("Validate: %v", err)
	}
}
