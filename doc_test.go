// Tests of the repository as a whole: package docs and README.md.
package loadshed_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// packageDirs returns every directory of the module (not bench/, a module
// of its own, nor testdata) holding a Go file other than a test, with its
// files parsed for their comments.
func packageDirs(t *testing.T) map[string][]*ast.File {
	t.Helper()
	dirs := map[string][]*ast.File{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path == "bench" || d.Name() == "testdata" || (path != "." && strings.HasPrefix(d.Name(), ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			return err
		}
		dirs[filepath.Dir(path)] = append(dirs[filepath.Dir(path)], f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return dirs
}

// Every package has a doc, in one comment (a blank line in it ends the
// doc, and go doc shows only what follows), whose first sentence begins
// "Package <name>" ("Command <dir>" for a command), as go doc and
// pkg.go.dev expect.
func TestEveryPackageHasADoc(t *testing.T) {
	for dir, files := range packageDirs(t) {
		var docs []string
		name := files[0].Name.Name
		for _, f := range files {
			if f.Doc != nil {
				docs = append(docs, f.Doc.Text())
			}
		}
		want := "Package " + name + " "
		if name == "main" {
			want = "Command " + filepath.Base(dir) + " "
		}
		switch {
		case len(docs) == 0:
			t.Errorf("%s: no package doc (want one beginning %q)", dir, want)
		case len(docs) > 1:
			t.Errorf("%s: %d files have a package doc; keep it in one", dir, len(docs))
		case !strings.HasPrefix(docs[0], want):
			first, _, _ := strings.Cut(docs[0], "\n")
			t.Errorf("%s: package doc begins %q, want %q", dir, first, want)
		}
	}
}

// The package doc is the comment right above the package clause: a blank
// line inside it would leave the part above as a stray comment. Such a
// comment ending a doc file's header is reported, since go doc would show
// only what follows it.
func TestNoPackageDocIsCutByABlankLine(t *testing.T) {
	for dir, files := range packageDirs(t) {
		for _, f := range files {
			if f.Doc == nil || len(f.Comments) == 0 || f.Comments[0] == f.Doc {
				continue
			}
			if c := f.Comments[0]; c.Pos() < f.Package && strings.HasPrefix(c.Text(), "Package ") {
				t.Errorf("%s: a blank line cuts the package doc that begins %q", dir, strings.SplitN(c.Text(), "\n", 2)[0])
			}
		}
	}
}
