package llmrt

import (
	"bufio"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// manifest is bindings/abi_manifest.txt: the header's constants and struct layouts.
type manifest struct {
	consts  map[string]int64
	structs map[string][2]uintptr            // size, align
	fields  map[string]map[string][2]uintptr // struct -> field -> offset, size
}

func readManifest(t *testing.T, path string) manifest {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	m := manifest{map[string]int64{}, map[string][2]uintptr{}, map[string]map[string][2]uintptr{}}
	num := func(s string, line int) uintptr {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("%s:%d: %q is not a number", path, line, s)
		}
		return uintptr(v)
	}
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		w := strings.Fields(sc.Text())
		switch {
		case len(w) == 0:
		case w[0] == "const" && len(w) == 3:
			v, err := strconv.ParseInt(w[2], 10, 64)
			if err != nil {
				t.Fatalf("%s:%d: %v", path, line, err)
			}
			m.consts[w[1]] = v
		case w[0] == "struct" && len(w) == 6 && w[2] == "size" && w[4] == "align":
			m.structs[w[1]] = [2]uintptr{num(w[3], line), num(w[5], line)}
		case w[0] == "field" && len(w) == 6 && w[2] == "offset" && w[4] == "size":
			dot := strings.IndexByte(w[1], '.')
			if dot < 0 {
				t.Fatalf("%s:%d: field %q has no struct", path, line, w[1])
			}
			s, fld := w[1][:dot], w[1][dot+1:]
			if m.fields[s] == nil {
				m.fields[s] = map[string][2]uintptr{}
			}
			m.fields[s][fld] = [2]uintptr{num(w[3], line), num(w[5], line)}
		default:
			t.Fatalf("%s:%d: unknown line %q", path, line, sc.Text())
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(m.consts) == 0 || len(m.structs) == 0 {
		t.Fatalf("%s holds no constants or structs", path)
	}
	return m
}

func TestABIMatchesManifest(t *testing.T) {
	m := readManifest(t, repoPath("bindings/abi_manifest.txt"))

	for name, v := range abiConstants() {
		want, ok := m.consts[name]
		if !ok {
			t.Errorf("constant %s: not in the manifest", name)
		} else if v != want {
			t.Errorf("constant %s: the binding says %d, the header %d", name, v, want)
		}
	}
	if want := strconv.Itoa(versionMajor) + "." + strconv.Itoa(versionMinor) + "." + strconv.Itoa(versionPatch); HeaderVersion != want {
		t.Errorf("HeaderVersion %q, the version constants say %q", HeaderVersion, want)
	}

	declared := map[string]bool{}
	for _, s := range abiStructs() {
		declared[s.name] = true
		want, ok := m.structs[s.name]
		if !ok {
			t.Errorf("struct %s: not in the manifest", s.name)
			continue
		}
		if s.size != want[0] || s.align != want[1] {
			t.Errorf("struct %s: size %d align %d, the header %d, %d", s.name, s.size, s.align, want[0], want[1])
		}
		seen := map[string]bool{}
		for _, f := range s.fields {
			seen[f.name] = true
			wf, ok := m.fields[s.name][f.name]
			if !ok {
				t.Errorf("field %s.%s: not in the manifest", s.name, f.name)
			} else if f.offset != wf[0] || f.size != wf[1] {
				t.Errorf("field %s.%s: offset %d size %d, the header %d, %d", s.name, f.name, f.offset, f.size, wf[0], wf[1])
			}
		}
		// A field the header has and the binding does not know: the struct grew, and the binding
		// has to follow (fill it, expose it, or say why not).
		for name := range m.fields[s.name] {
			if !seen[name] {
				t.Errorf("field %s.%s: in the header, not declared by the binding", s.name, name)
			}
		}
	}

	// Every header struct that the binding's sources name must be declared above.
	used := usedStructs(t, m)
	for _, name := range used {
		if !declared[name] {
			t.Errorf("struct %s: used by the binding but missing from abiStructs", name)
		}
	}
	if len(used) < len(abiStructs()) {
		t.Errorf("the sources name %d header structs (%v), abiStructs declares %d", len(used), used, len(abiStructs()))
	}
}

// usedStructs scans the package's non-test sources, cgo preambles included, for the names of the
// manifest's structs.
func usedStructs(t *testing.T, m manifest) []string {
	files, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	ident := regexp.MustCompile(`\bllm_[a-z0-9_]+\b`)
	found := map[string]bool{}
	for _, f := range files {
		if !strings.HasSuffix(f.Name(), ".go") || strings.HasSuffix(f.Name(), "_test.go") {
			continue
		}
		src, err := os.ReadFile(f.Name())
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range ident.FindAllString(string(src), -1) {
			if _, ok := m.structs[id]; ok {
				found[id] = true
			}
		}
	}
	var names []string
	for n := range found {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func TestLibraryVersion(t *testing.T) {
	if v := Version(); v != HeaderVersion {
		t.Errorf("library %s, binding written for header %s", v, HeaderVersion)
	}
	for st := StatusOK; st <= StatusInternal; st++ {
		if got := statusString(st); got != st.String() {
			t.Errorf("llm_status_string(%d) = %s, the binding says %s", st, got, st)
		}
	}
}
