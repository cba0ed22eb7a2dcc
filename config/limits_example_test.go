package config_test

import (
	"fmt"
	"strings"

	"github.com/loadshed/loadshed/config"
)

// A file past a limit is refused at the position where it passes it; a
// program that reads larger files raises the limit in Options.
func ExampleLimits() {
	deep := "layers:\n  - ratelimit:\n      descriptors: " + strings.Repeat("[{key: key, descriptors: ", 200) + "[]" + strings.Repeat("}]", 200) + "\n"
	_, err := config.Parse("deep.yaml", []byte(deep), config.Options{})
	fmt.Println(err)

	_, err = config.Parse("deep.yaml", []byte(deep), config.Options{Limits: config.Limits{MaxDepth: 500}})
	fmt.Println(err != nil && strings.Contains(err.Error(), "deeper"))
	// Output:
	// deep.yaml:3:1220: nested deeper than 100 levels (raise the limit to read it)
	// false
}

// A refusal with many errors lists twenty in full and counts the rest.
func ExampleErrors_Error() {
	var es config.Errors
	for i := range 25 {
		es = append(es, &config.Error{File: "f.yaml", Line: i + 1, Column: 3, Path: fmt.Sprintf("layers[%d]", i), Msg: "unknown field \"x\""})
	}
	lines := strings.Split(es.Error(), "\n")
	fmt.Println(len(lines))
	fmt.Println(lines[len(lines)-1])
	// Output:
	// 21
	// and 5 more errors
}
