// Command benchtable turns Go benchmark output (several -count runs) into
// markdown tables of medians, with each contender's ratio to a reference
// contender of the same group.
//
// A benchmark name is split at "/" (the -cpu suffix "-N" of the last
// element is kept apart): the element at index -by names the contender, the
// other elements name the group. For
//
//	BenchmarkRedis/redis_rate/callers=64-2
//
// -by 1 gives contender "redis_rate" in group "BenchmarkRedis/callers=64-2".
//
// Usage:
//
//	benchtable [-by N] [-ref NAME] [-metrics ns/op,B/op] [FILE...]
//
// Ratios are of the first metric: value / reference value.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

type series struct {
	group, contender string
	values           map[string][]float64 // unit -> one value per run
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("benchtable", flag.ContinueOnError)
	fs.SetOutput(stderr)
	by := fs.Int("by", -1, "index of the name element that names the contender; negative counts from the end")
	ref := fs.String("ref", "", "reference contender for the ratio column")
	metrics := fs.String("metrics", "ns/op,B/op,allocs/op", "comma-separated units to show; the first is the ratio's")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	units := strings.Split(*metrics, ",")
	var groups []string
	all := map[string]map[string]*series{}
	var order []*series
	read := func(r io.Reader) error {
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") || len(f)%2 != 0 {
				continue
			}
			g, c := split(f[0], *by)
			if all[g] == nil {
				all[g] = map[string]*series{}
				groups = append(groups, g)
			}
			s := all[g][c]
			if s == nil {
				s = &series{group: g, contender: c, values: map[string][]float64{}}
				all[g][c] = s
				order = append(order, s)
			}
			for i := 2; i+1 < len(f); i += 2 {
				v, err := strconv.ParseFloat(f[i], 64)
				if err != nil {
					continue
				}
				s.values[f[i+1]] = append(s.values[f[i+1]], v)
			}
		}
		return sc.Err()
	}
	if fs.NArg() == 0 {
		if err := read(stdin); err != nil {
			fmt.Fprintf(stderr, "benchtable: %v\n", err)
			return 1
		}
	}
	for _, name := range fs.Args() {
		f, err := os.Open(name)
		if err != nil {
			fmt.Fprintf(stderr, "benchtable: %v\n", err)
			return 1
		}
		err = read(f)
		f.Close()
		if err != nil {
			fmt.Fprintf(stderr, "benchtable: %s: %v\n", name, err)
			return 1
		}
	}
	for _, g := range groups {
		fmt.Fprintf(stdout, "\n%s\n\n| contender | runs |", g)
		for _, u := range units {
			fmt.Fprintf(stdout, " %s (median) |", u)
		}
		if *ref != "" {
			fmt.Fprintf(stdout, " vs %s |", *ref)
		}
		fmt.Fprint(stdout, "\n|---|---|")
		for range units {
			fmt.Fprint(stdout, "---|")
		}
		if *ref != "" {
			fmt.Fprint(stdout, "---|")
		}
		fmt.Fprintln(stdout)
		var refv float64
		if r := all[g][*ref]; r != nil {
			refv = median(r.values[units[0]])
		}
		for _, s := range order {
			if s.group != g {
				continue
			}
			fmt.Fprintf(stdout, "| %s | %d |", s.contender, len(s.values[units[0]]))
			for _, u := range units {
				if vs := s.values[u]; len(vs) > 0 {
					fmt.Fprintf(stdout, " %s |", format(median(vs)))
				} else {
					fmt.Fprint(stdout, " - |")
				}
			}
			if *ref != "" {
				if v := median(s.values[units[0]]); refv > 0 && v > 0 {
					fmt.Fprintf(stdout, " %.2fx |", v/refv)
				} else {
					fmt.Fprint(stdout, " - |")
				}
			}
			fmt.Fprintln(stdout)
		}
	}
	return 0
}

// split returns the group and contender of a benchmark name.
func split(name string, by int) (group, contender string) {
	cpu := ""
	if i := strings.LastIndexByte(name, '-'); i > 0 {
		if _, err := strconv.Atoi(name[i+1:]); err == nil {
			name, cpu = name[:i], name[i:]
		}
	}
	parts := strings.Split(name, "/")
	if by < 0 {
		by += len(parts)
	}
	if by < 0 || by >= len(parts) {
		return name + cpu, ""
	}
	contender = parts[by]
	parts = slices.Delete(parts, by, by+1)
	return strings.Join(parts, "/") + cpu, contender
}

func median(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func format(v float64) string {
	switch {
	case v >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case v >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64)
}
