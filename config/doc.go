// Package config reads the whole defence from one declarative file (YAML,
// or JSON), checks it, builds its chain and HTTP middleware, and replaces
// them while the service runs when the file changes.
//
//	live, err := config.Open("loadshed.yaml", config.Options{})
//	if err != nil {
//		log.Fatal(err) // every error of the file, each with its line and column
//	}
//	defer live.Close()
//	go live.Watch(ctx) // reload when the file changes, and on SIGHUP
//	http.ListenAndServe(addr, live.Middleware()(mux))
//
// Load builds a file once, without reloading (Built.Chain,
// Built.Middleware); Parse only reads and checks it. `loadshed check FILE`
// (cmd/loadshed) checks a file from the shell.
//
// # The file
//
// A file lists the chain's layers in order, each a section: ratelimit
// (rules written as Lyft's envoyproxy/ratelimit writes them: a domain, a
// tree of key/value descriptors, a rate_limit of unit and
// requests_per_unit, plus algorithm, burst and shadow_mode), concurrency
// (overall, per key, adaptive), fleet (capacity and ceilings per priority,
// shared through Redis) and worker (CPU budget and thresholds; the
// headroom signal elastic layers read). Every layer has its mode (hard,
// soft, elastic), dry_run, action (reject, queue) and queue bounds.
// The http section says whose a request is and how important its route is
// ("POST /v1/charges": critical); the redis section is the shared store
// of the layers with store: redis. examples/loadshed.yaml shows every
// field. The same structs (File and below) can be filled in Go and given
// to Build.
//
// # Errors
//
// Parse reports every problem of a file at once, not only the first: each
// *Error names the file, line and column, the field's path
// (layers[0].ratelimit.descriptors[1].rate_limit.unit), what is wrong, and
// the allowed values when they are few:
//
//	loadshed.yaml:18:23: layers[0].ratelimit.descriptors[1].rate_limit.unit: unknown value "fortnight" (allowed: second, minute, hour, day)
//
// # Limits
//
// A file may come from someone else (a ConfigMap several teams edit), so
// reading one is bounded: a file larger than Limits.MaxBytes (4 MiB),
// nested deeper than MaxDepth (100 levels), holding more than MaxValues
// values (200,000, each alias counted as every value it brings in) or
// more than MaxRules rate-limit descriptors (20,000) is refused, with the
// line and column where it passes the limit, before the work that would
// cost memory in proportion to it: a refusal costs a few MB and a few
// milliseconds. Options.Limits raises them. A value the field cannot hold
// exactly (requests_per_unit: 2.5, a number where text is wanted) is an
// error, never rounded or reformatted. Errors.Error lists at most
// MaxErrorsShown errors and counts the rest. docs/config-limits.md gives
// the largest realistic file measured against the defaults.
//
// # Reloading
//
// Open puts a file in service as a *Live; Live.Watch reloads it when the
// file changes and on SIGHUP, and Live.Reload on demand. A bad file is
// refused, logged and counted, and the running configuration keeps
// serving. A good one is swapped in atomically; limiters of rules whose
// definition did not change, and concurrency, fleet and worker layers whose
// section did not, are carried over, so their counts go on; requests already admitted
// release their leases to the layers that granted them, and the replaced
// configuration is closed when its last request ends. Live.LastReload
// reports the last reload's time and refusal, for a status page; no file,
// and no failure of the YAML library on one, ends Watch.
//
// The command cmd/loadshed checks, prints and tries a file.
package config
