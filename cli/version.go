package cli

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
)

func init() {
	register(&command{name: "version", summary: "print braid's version, commit and Go version", run: runVersion})
}

// modulePath is braid's module, reported when the binary carries no build
// information (never the case for a binary the go command built).
const modulePath = "github.com/braid-hpc/braid"

// versionInfo is what 'braid version' reports; its --json output has
// every field, empty when unknown.
type versionInfo struct {
	Module string `json:"module"`
	// Version is the module version: a tag for 'go install ...@vX.Y.Z',
	// "(devel)" for a build from a checkout.
	Version string `json:"version"`
	// Commit and Time are the VCS revision and its commit time (RFC 3339);
	// empty when built without VCS information (-buildvcs=false, or not
	// from a checkout). Modified reports uncommitted changes.
	Commit   string `json:"commit"`
	Time     string `json:"time"`
	Modified bool   `json:"modified"`
	// Go is the toolchain that built the binary; Platform is GOOS/GOARCH.
	Go       string `json:"go"`
	Platform string `json:"platform"`
}

// newVersionInfo extracts the version from bi, which may be nil.
func newVersionInfo(bi *debug.BuildInfo) versionInfo {
	v := versionInfo{Module: modulePath, Version: "(devel)", Go: runtime.Version(),
		Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi == nil {
		return v
	}
	if bi.Main.Path != "" {
		v.Module = bi.Main.Path
	}
	if bi.Main.Version != "" {
		v.Version = bi.Main.Version
	}
	if bi.GoVersion != "" {
		v.Go = bi.GoVersion
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Commit = s.Value
		case "vcs.time":
			v.Time = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	return v
}

// writeText prints v for people, one item a line.
func (v versionInfo) writeText(env *Env) {
	fmt.Fprintf(env.Stdout, "braid %s\n", v.Version)
	fmt.Fprintf(env.Stdout, "  module  %s\n", v.Module)
	switch {
	case v.Commit == "":
		fmt.Fprintf(env.Stdout, "  commit  unknown (built without VCS information)\n")
	case v.Modified:
		fmt.Fprintf(env.Stdout, "  commit  %s (with uncommitted changes)\n", v.Commit)
	default:
		fmt.Fprintf(env.Stdout, "  commit  %s\n", v.Commit)
	}
	if v.Time != "" {
		fmt.Fprintf(env.Stdout, "  time    %s\n", v.Time)
	}
	fmt.Fprintf(env.Stdout, "  go      %s %s\n", v.Go, v.Platform)
}

// buildInfo is debug.ReadBuildInfo; tests replace it.
var buildInfo = func() *debug.BuildInfo {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return nil
	}
	return bi
}

func runVersion(ctx context.Context, env *Env, args []string) int {
	fs := newFlags(env, "version", "[--json]", `
Prints braid's module version, the VCS commit and commit time it was built
from, and the Go toolchain and platform. 'braid --version' is the same.`)
	asJSON := fs.Bool("json", false, "print one JSON object: module, version, commit, time, modified, go, platform")
	if code := parseFlags(env, fs, args); code >= 0 {
		return code
	}
	if fs.NArg() > 0 {
		return failUsage(env, "version", fmt.Errorf("unexpected arguments %q", fs.Args()))
	}
	v := newVersionInfo(buildInfo())
	if *asJSON {
		if err := jsonLine(env.Stdout, v); err != nil {
			env.Errorf("version: %v", err)
			return 1
		}
		return 0
	}
	v.writeText(env)
	return 0
}
