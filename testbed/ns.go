package testbed

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/braid-hpc/braid/internal/testenv"
)

// netnsDir is where `ip netns` keeps its named namespaces.
const netnsDir = "/run/netns"

// cmdTimeout bounds every ip or tc command.
const cmdTimeout = 10 * time.Second

// run runs one ip, tc or bridge command, bounded by cmdTimeout, and returns
// its standard output. The error carries the command line and its stderr.
func run(ctx context.Context, name string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, cmdTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = time.Second
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%w)", err, ctx.Err())
		}
		return nil, fmt.Errorf("testbed: %s %s: %w: %s", name, strings.Join(args, " "), err, msg)
	}
	return stdout.Bytes(), nil
}

// nsPath returns the bind-mount path of a named namespace.
func nsPath(ns string) string { return filepath.Join(netnsDir, ns) }

// nsExists reports whether the named namespace exists.
func nsExists(ns string) bool {
	_, err := os.Stat(nsPath(ns))
	return err == nil
}

// runIn runs f on the calling goroutine with its OS thread switched into
// the network namespace at path, and switches back afterwards. Sockets f
// creates stay in that namespace. Goroutines f starts do not run in it.
func runIn(path string, f func() error) (err error) {
	target, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("testbed: open namespace %s: %w", path, err)
	}
	defer unix.Close(target)

	runtime.LockOSThread()
	orig, err := unix.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("testbed: open current namespace: %w", err)
	}
	defer unix.Close(orig)
	if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("testbed: enter namespace %s: %w", path, err)
	}
	// Deferred so that a panic or runtime.Goexit (t.FailNow) in f restores
	// the thread too.
	defer func() {
		if rerr := unix.Setns(orig, unix.CLONE_NEWNET); rerr != nil {
			// Leave the thread locked: the runtime ends a locked thread
			// when its goroutine exits, so no other goroutine inherits it.
			err = errors.Join(err, fmt.Errorf("testbed: restore namespace after %s: %w", path, rerr))
			return
		}
		runtime.UnlockOSThread()
	}()
	return f()
}

// newID returns a short random id that prefixes every name of a bed.
func newID() string {
	var b [3]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

var (
	availOnce sync.Once
	availErr  error
)

// Available reports whether beds can be made here: nil if the process is
// root, ip and tc are installed and a network namespace can be created and
// removed. The error says what is missing. The probe runs once per process.
func Available() error {
	availOnce.Do(func() { availErr = probe() })
	return availErr
}

func probe() error {
	if os.Geteuid() != 0 {
		return errors.New("testbed: needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN) to create network namespaces; run the tests as root, e.g. sudo go test")
	}
	for _, tool := range []string{"ip", "tc", "bridge"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("testbed: %s not found in PATH; install iproute2", tool)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*cmdTimeout)
	defer cancel()
	ns := "bt" + newID() + "-probe"
	if _, err := run(ctx, "ip", "netns", "add", ns); err != nil {
		return fmt.Errorf("testbed: cannot create a network namespace (%w); a container needs --privileged or CAP_SYS_ADMIN", err)
	}
	var errs []error
	if _, err := run(ctx, "ip", "-n", ns, "link", "add", "bt-probe-br", "type", "bridge"); err != nil {
		errs = append(errs, fmt.Errorf("testbed: cannot create a bridge (%w); load the bridge module", err))
	}
	if _, err := run(ctx, "ip", "netns", "del", ns); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Skip skips t with the reason when beds cannot be made here (see
// Available), or fails it when BRAID_REQUIRE_NETNS=1 (CI).
func Skip(t testing.TB) {
	t.Helper()
	if err := Available(); err != nil {
		testenv.Missing(t, testenv.NetNS, err.Error())
	}
}

// SkipLoss is Skip for beds that also emulate loss (Bed.SetLoss), which
// needs nft.
func SkipLoss(t testing.TB) {
	t.Helper()
	Skip(t)
	if _, err := exec.LookPath("nft"); err != nil {
		testenv.Missing(t, testenv.NetNS, "nft not found in PATH; install nftables to emulate loss")
	}
}
