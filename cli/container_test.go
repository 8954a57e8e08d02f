package cli

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestContainerImage builds the final stage of deploy/Containerfile with
// buildah (Debian package buildah; as root, vfs storage, chroot
// isolation: no container daemon) and runs braid in the image. It is
// opt-in, BRAID_CONTAINER_BUILD=1, as it needs root and takes a while.
//
// The base images the Containerfile names (golang, debian) come from a
// registry, which a test may not reach, so the test builds the binary
// itself (as the build stage does: static, -trimpath) and puts the final
// stage on an empty base: FROM becomes scratch, COPY --from=build takes
// that binary, and the RUN lines, which need the base's shell, become
// the files they make (the braid user and its 0700 data directory). Every
// other line (COPY of the config, USER, VOLUME, EXPOSE, ENTRYPOINT, CMD)
// is the Containerfile's own.
func TestContainerImage(t *testing.T) {
	if os.Getenv("BRAID_CONTAINER_BUILD") != "1" {
		t.Skip("builds a container image as root with buildah; set BRAID_CONTAINER_BUILD=1 to run it")
	}
	buildah, err := exec.LookPath("buildah")
	if err != nil {
		t.Fatal("BRAID_CONTAINER_BUILD=1 but no buildah on PATH (Debian: apt-get install buildah)")
	}
	if os.Geteuid() != 0 {
		t.Fatal("BRAID_CONTAINER_BUILD=1 but not root: buildah with vfs storage and chroot isolation needs root")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	work := t.TempDir()
	bctx := filepath.Join(work, "context")
	for _, d := range []string{"deploy", "rootfs/etc", "rootfs/var/lib/braid"} {
		if err := os.MkdirAll(filepath.Join(bctx, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	goTool := "go"
	if _, err := exec.LookPath(goTool); err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	build := exec.CommandContext(ctx, goTool, "build", "-trimpath", "-o", filepath.Join(bctx, "braid"), "github.com/braid-hpc/braid/cmd/braid")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	entries, err := os.ReadDir(deployDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(deployDir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(bctx, "deploy", e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// What the RUN lines make: the braid system user, and its data
	// directory.
	for name, content := range map[string]string{
		"rootfs/etc/passwd": "root:x:0:0:root:/root:/usr/sbin/nologin\nbraid:x:999:999::/var/lib/braid:/usr/sbin/nologin\n",
		"rootfs/etc/group":  "root:x:0:\nbraid:x:999:\n",
	} {
		if err := os.WriteFile(filepath.Join(bctx, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(bctx, "rootfs/var/lib/braid"), 0o700); err != nil {
		t.Fatal(err)
	}
	final := finalStage(t, filepath.Join(deployDir, "Containerfile"))
	if err := os.WriteFile(filepath.Join(bctx, "Containerfile"), []byte(final), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("the final stage on an empty base:\n%s", final)

	storage := []string{"--root", filepath.Join(work, "storage"), "--runroot", filepath.Join(work, "run"), "--storage-driver", "vfs"}
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, buildah, append(storage, args...)...)
		b, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("buildah %s: %v\n%s", strings.Join(args, " "), err, b)
		}
		return string(b)
	}
	t.Cleanup(func() {
		for _, args := range [][]string{{"rm", "--all"}, {"rmi", "--all", "--force"}} {
			exec.Command(buildah, append(storage, args...)...).Run()
		}
	})
	const image = "localhost/braid-test:final-stage"
	run("build", "--isolation", "chroot", "-t", image, "-f", filepath.Join(bctx, "Containerfile"), bctx)
	cfg := run("inspect", "--type", "image", "--format",
		"user={{.OCIv1.Config.User}} entrypoint={{.OCIv1.Config.Entrypoint}} cmd={{.OCIv1.Config.Cmd}} volumes={{.OCIv1.Config.Volumes}} ports={{.OCIv1.Config.ExposedPorts}}", image)
	for _, want := range []string{"user=braid", "entrypoint=[/usr/local/bin/braid]", "cmd=[server --config /etc/braid/server.yaml]",
		"/var/lib/braid:", "7400/tcp:"} {
		if !strings.Contains(cfg, want) {
			t.Errorf("the image's configuration %q lacks %q", cfg, want)
		}
	}
	ctr := strings.TrimSpace(run("from", "--name", "braid-test-ctr", image))
	out := run("run", "--isolation", "chroot", ctr, "--", "/usr/local/bin/braid", "version")
	if !strings.Contains(out, "github.com/braid-hpc/braid") || !strings.Contains(out, runtime.Version()) {
		t.Errorf("braid version in the image printed %q", out)
	}
	// The braid user owns its data directory and may write there. (Its
	// mode, 0700, the RUN line sets: buildah's COPY makes directories
	// 0755 whatever --chmod says.)
	root := strings.TrimSpace(run("mount", ctr))
	if fi, err := os.Stat(filepath.Join(root, "var/lib/braid")); err != nil || !fi.IsDir() {
		t.Errorf("/var/lib/braid in the image: %v, %v; want a directory", fi, err)
	} else if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid != 999 {
		t.Errorf("/var/lib/braid in the image is owned by uid %d, want braid (999)", st.Uid)
	}
	run("umount", ctr)
	run("run", "--isolation", "chroot", ctr, "--", "/usr/local/bin/braid", "sample", "-o", "/var/lib/braid/sample.png")
	// The image's own command, as the braid user, with no key: it reads
	// its configuration and stops, asking for the key.
	cmd := exec.CommandContext(ctx, buildah, append(storage, "run", "--isolation", "chroot", ctr, "--",
		"/usr/local/bin/braid", "server", "--config", "/etc/braid/server.yaml")...)
	b, err := cmd.CombinedOutput()
	if code := cmd.ProcessState.ExitCode(); err == nil || code != 2 || !strings.Contains(string(b), "no cluster key") {
		t.Errorf("braid server in the image without a key: exit %d, %v: %s", code, err, b)
	}
}

// finalStage returns the last stage of a Containerfile, made to build on
// an empty base from the context TestContainerImage prepares.
func finalStage(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	last := -1
	for i, l := range lines {
		if strings.HasPrefix(l, "FROM ") {
			last = i
		}
	}
	if last < 0 {
		t.Fatalf("%s has no FROM", path)
	}
	var b strings.Builder
	b.WriteString("FROM scratch\n")
	inRun := false
	for _, l := range lines[last+1:] {
		cont := strings.HasSuffix(strings.TrimSpace(l), "\\")
		switch {
		case inRun:
			inRun = cont
			continue
		case strings.HasPrefix(l, "RUN "):
			inRun = cont
			b.WriteString("COPY rootfs/etc/ /etc/\nCOPY --chown=braid:braid rootfs/var/lib/braid /var/lib/braid\n")
			continue
		case strings.HasPrefix(l, "COPY --from=build "):
			f := strings.Fields(l)
			l = "COPY braid " + f[len(f)-1]
		}
		b.WriteString(l + "\n")
	}
	if strings.Count(b.String(), "COPY rootfs/etc/ /etc/") != 1 {
		t.Fatalf("want one RUN line in the final stage of %s:\n%s", path, b.String())
	}
	return b.String()
}
