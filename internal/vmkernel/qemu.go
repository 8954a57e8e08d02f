package vmkernel

import (
	"bytes"
	"compress/gzip"
	"context"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/braid-hpc/braid/internal/uml"
)

// The QEMU backend. Its one-time setup (about 30 s and 70 MB of download)
// makes, in the cache directory (EnvDir, else /var/cache/braid-vm where it
// can be written, else the user's cache directory):
//
//	k/            Debian's linux-image-VERSION-amd64 package, unpacked, depmod run
//	vmlinux       the kernel as an uncompressed ELF: QEMU boots it through PVH,
//	              which skips the decompression (about 4 s under TCG)
//	initrd.gz     busybox-static and the 9p, virtio and overlay modules; its
//	              init mounts the host's root and switches to it
//	ready         the kernel release, written last
//
// under a file lock (DIR.lock), so test binaries started at once set it up
// once. A run then boots that kernel with the host's root shared over 9p
// (read-only, a tmpfs overlay on top), and a temp dir shared read-write
// for the command script, its output and its exit status.

// EnvDir is the environment variable that names the QEMU backend's cache
// directory.
const EnvDir = "BRAID_VM_DIR"

// EnvKernelPackage is the environment variable that names the Debian
// kernel package to use instead of the one linux-image-amd64 depends on.
const EnvKernelPackage = "BRAID_VM_KPKG"

// qemuInstall is what to install for the QEMU backend.
const qemuInstall = "apt-get install -y --no-install-recommends qemu-system-x86 busybox-static kmod xz-utils"

// cacheDir is the QEMU backend's cache directory.
func cacheDir() string {
	if d := os.Getenv(EnvDir); d != "" {
		if abs, err := filepath.Abs(d); err == nil {
			return abs
		}
		return d
	}
	const system = "/var/cache/braid-vm"
	if err := os.MkdirAll(filepath.Dir(system), 0o755); err == nil && unix.Access(filepath.Dir(system), unix.W_OK) == nil {
		return system
	}
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "braid-vm")
	}
	return filepath.Join(os.TempDir(), "braid-vm")
}

// readyRelease returns the kernel release of a finished setup in dir.
func readyRelease(dir string) (string, bool) {
	b, err := os.ReadFile(filepath.Join(dir, "ready"))
	if err != nil {
		return "", false
	}
	kver := strings.TrimSpace(string(b))
	for _, f := range []string{"vmlinux", "initrd.gz", filepath.Join("k", "lib", "modules", kver, "modules.dep")} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			return "", false
		}
	}
	return kver, kver != ""
}

// qemuInstalled reports whether the QEMU backend can run: QEMU and kmod
// are installed, and the kernel is set up or can be (apt-get, dpkg-deb,
// xz and a static busybox).
func qemuInstalled() error {
	need := []string{"qemu-system-x86_64", "modprobe"}
	if _, ok := readyRelease(cacheDir()); !ok {
		need = append(need, "apt-get", "apt-cache", "dpkg-deb", "depmod", "xz")
	}
	var missing []string
	for _, c := range need {
		if _, err := lookPath(c); err != nil {
			missing = append(missing, c)
		}
	}
	if _, ok := readyRelease(cacheDir()); !ok {
		if _, err := staticBusybox(); err != nil {
			missing = append(missing, err.Error())
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: QEMU backend: missing %s: %s", ErrUnavailable, strings.Join(missing, ", "), qemuInstall)
	}
	return nil
}

// lookPath finds a command in PATH or in the sbin directories, which a
// test's PATH may lack.
func lookPath(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, d := range []string{"/usr/sbin", "/sbin", "/usr/bin", "/bin"} {
		p := filepath.Join(d, name)
		if st, err := os.Stat(p); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("no %s", name)
}

// staticBusybox returns the path of a statically linked busybox, which
// the initramfs runs without a C library.
func staticBusybox() (string, error) {
	for _, p := range []string{"/bin/busybox", "/usr/bin/busybox"} {
		f, err := elf.Open(p)
		if err != nil {
			continue
		}
		static := true
		for _, prog := range f.Progs {
			if prog.Type == elf.PT_INTERP {
				static = false
			}
		}
		f.Close()
		if static {
			return p, nil
		}
	}
	return "", errors.New("no statically linked busybox (busybox-static)")
}

// lockDir takes the setup lock of dir, waiting while another process
// holds it, until ctx ends.
func lockDir(ctx context.Context, dir string) (*os.File, error) {
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return nil, fmt.Errorf("vmkernel: cache directory: %w", err)
	}
	f, err := os.OpenFile(dir+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("vmkernel: cache lock: %w", err)
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("vmkernel: lock %s.lock: %w", dir, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("vmkernel: waiting for another process's kernel setup in %s: %w", dir, context.Cause(ctx))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Setup prepares the QEMU backend's kernel and initramfs in its cache
// directory, once: a later call, from this process or another, finds them
// ready. It returns the kernel release and how long the setup took (0
// when it was ready).
func Setup(ctx context.Context) (kernel string, took time.Duration, err error) {
	dir := cacheDir()
	if kver, ok := readyRelease(dir); ok {
		return kver, 0, nil
	}
	if err := qemuInstalled(); err != nil {
		return "", 0, err
	}
	lock, err := lockDir(ctx, dir)
	if err != nil {
		return "", 0, err
	}
	defer lock.Close() // releases the flock
	if kver, ok := readyRelease(dir); ok {
		return kver, 0, nil
	}
	start := time.Now()
	kver, err := setup(ctx, dir)
	if err != nil {
		return "", 0, fmt.Errorf("vmkernel: QEMU kernel setup in %s: %w", dir, err)
	}
	return kver, time.Since(start), nil
}

// run runs a setup command, its output in the error.
func run(ctx context.Context, dir string, name string, args ...string) ([]byte, error) {
	p, err := lookPath(name)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, p, args...)
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, tail(stderr.Bytes(), 500))
	}
	return out, nil
}

// kernelPackage is the Debian kernel package to unpack.
func kernelPackage(ctx context.Context) (string, error) {
	if p := os.Getenv(EnvKernelPackage); p != "" {
		return p, nil
	}
	out, err := run(ctx, "/", "apt-cache", "depends", "linux-image-amd64")
	if err != nil {
		return "", err
	}
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Fields(l)
		if len(f) == 2 && f[0] == "Depends:" && strings.HasPrefix(f[1], "linux-image-") && f[1][len("linux-image-")] >= '0' && f[1][len("linux-image-")] <= '9' {
			return f[1], nil
		}
	}
	return "", fmt.Errorf("apt-cache depends linux-image-amd64 names no linux-image-VERSION package (run apt-get update, or set %s):\n%s", EnvKernelPackage, out)
}

// setup builds the cache in dir.tmp and renames it to dir.
func setup(ctx context.Context, dir string) (string, error) {
	work := dir + ".tmp"
	if err := os.RemoveAll(work); err != nil {
		return "", err
	}
	if err := os.MkdirAll(work, 0o755); err != nil {
		return "", err
	}
	// apt-get download drops its privileges to _apt, which must be able
	// to write here.
	_ = os.Chmod(work, 0o777)
	pkg, err := kernelPackage(ctx)
	if err != nil {
		return "", err
	}
	if _, err := run(ctx, work, "apt-get", "download", "-q", pkg); err != nil {
		return "", err
	}
	debs, _ := filepath.Glob(filepath.Join(work, "*.deb"))
	if len(debs) != 1 {
		return "", fmt.Errorf("apt-get download %s left %d .deb files", pkg, len(debs))
	}
	k := filepath.Join(work, "k")
	if _, err := run(ctx, work, "dpkg-deb", "-x", debs[0], k); err != nil {
		return "", err
	}
	os.Remove(debs[0])
	ents, err := os.ReadDir(filepath.Join(k, "lib", "modules"))
	if err != nil || len(ents) != 1 {
		return "", fmt.Errorf("%s: want one kernel under lib/modules, found %d (%v)", pkg, len(ents), err)
	}
	kver := ents[0].Name()
	if _, err := run(ctx, work, "depmod", "-b", k, kver); err != nil {
		return "", err
	}
	if err := extractVmlinux(ctx, filepath.Join(k, "boot", "vmlinuz-"+kver), filepath.Join(work, "vmlinux")); err != nil {
		return "", err
	}
	if err := buildInitrd(ctx, k, kver, filepath.Join(work, "initrd.gz")); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(work, "ready"), []byte(kver+"\n"), 0o644); err != nil {
		return "", err
	}
	if err := os.RemoveAll(dir); err != nil {
		return "", err
	}
	if err := os.Rename(work, dir); err != nil {
		return "", err
	}
	return kver, nil
}

// extractVmlinux writes the ELF kernel inside bzImage vmlinuz to out (its
// xz stream, decompressed), or vmlinuz itself where it has none.
func extractVmlinux(ctx context.Context, vmlinuz, out string) error {
	img, err := os.ReadFile(vmlinuz)
	if err != nil {
		return err
	}
	if i := bytes.Index(img, []byte("\xfd7zXZ\x00")); i >= 0 {
		xz, err := lookPath("xz")
		if err != nil {
			return err
		}
		cmd := exec.CommandContext(ctx, xz, "-dc", "--single-stream")
		cmd.Stdin = bytes.NewReader(img[i:])
		elfImg, _ := cmd.Output() // trailing data after the stream makes xz complain
		if bytes.HasPrefix(elfImg, []byte("\x7fELF")) && len(elfImg) > 1<<20 {
			return os.WriteFile(out, elfImg, 0o644)
		}
	}
	return os.WriteFile(out, img, 0o644)
}

// initrdModules are loaded by the initramfs to reach the host's root.
var initrdModules = []string{"virtio_pci", "9pnet_virtio", "9p", "overlay"}

// modprobeFiles returns the module files modprobe would insert, in order,
// to load mods from the modules of kver under root.
func modprobeFiles(ctx context.Context, root, kver string, mods []string) ([]string, error) {
	var files []string
	seen := map[string]bool{}
	for _, m := range mods {
		out, err := run(ctx, "/", "modprobe", "-d", root, "-S", kver, "-D", m)
		if err != nil {
			return nil, err
		}
		for _, l := range strings.Split(string(out), "\n") {
			f := strings.Fields(l)
			if len(f) >= 2 && f[0] == "insmod" && !seen[f[1]] {
				seen[f[1]] = true
				files = append(files, f[1])
			}
		}
	}
	return files, nil
}

// initScript is the initramfs's /init: load what reaching the host's root
// needs, mount it with a tmpfs overlay, mount the run's temp dir
// (vm.xfer=) and the kernel's modules (vm.kmod=), and run the run's
// script in the new root. The script's own exit status is written by the
// script; init powers off after it.
const initScript = `#!/bin/sh
export PATH=/bin
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev
for w in $(cat /proc/cmdline); do case $w in vm.xfer=*) X=${w#*=};; vm.kmod=*) KM=${w#*=};; esac; done
for m in $(cat /ko/order); do insmod /ko/$m || echo "vmkernel-init: insmod $m failed"; done
o=trans=virtio,version=9p2000.L,msize=262144
mkdir -p /lower /rw /newroot
mount -t 9p -o $o,ro,cache=loose hostroot /lower && mount -t tmpfs -o mode=755 rw /rw &&
mkdir -p /rw/u /rw/w && mount -t overlay -o lowerdir=/lower,upperdir=/rw/u,workdir=/rw/w root /newroot ||
  { echo "vmkernel-init: cannot mount the host's root"; exec poweroff -f; }
mkdir -p /newroot$X && mount -t 9p -o $o xfer /newroot$X ||
  { echo "vmkernel-init: cannot mount $X"; exec poweroff -f; }
mkdir -p /newroot/lib/modules && mount --bind /lower$KM /newroot/lib/modules
for d in proc sys dev; do mount --move /$d /newroot/$d; done
mkdir -p /newroot/dev/pts /newroot/dev/shm /newroot/run /newroot/tmp
mount -t devpts devpts /newroot/dev/pts; mount -t tmpfs shm /newroot/dev/shm; mount -t tmpfs run /newroot/run
ip link set lo up; hostname vmkernel
exec switch_root /newroot /bin/sh -c "/bin/sh $X/run </dev/null >>$X/console 2>&1; sync; echo o > /proc/sysrq-trigger; sleep 9"
`

// buildInitrd writes the initramfs: busybox, the modules to reach the
// host's root, and init.
func buildInitrd(ctx context.Context, k, kver, out string) error {
	bb, err := staticBusybox()
	if err != nil {
		return err
	}
	bbImg, err := os.ReadFile(bb)
	if err != nil {
		return err
	}
	mods, err := modprobeFiles(ctx, k, kver, initrdModules)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	cw := &cpioWriter{w: zw}
	for _, d := range []string{"bin", "ko", "proc", "sys", "dev"} {
		cw.dir(d)
	}
	cw.file("bin/busybox", 0o755, bbImg)
	for _, a := range []string{"sh", "mount", "mkdir", "insmod", "switch_root", "ip", "cat", "hostname", "poweroff"} {
		cw.symlink("bin/"+a, "busybox")
	}
	var order []string
	for _, m := range mods {
		b, err := os.ReadFile(m)
		if err != nil {
			return err
		}
		cw.file("ko/"+filepath.Base(m), 0o644, b)
		order = append(order, filepath.Base(m))
	}
	cw.file("ko/order", 0o644, []byte(strings.Join(order, "\n")+"\n"))
	cw.file("init", 0o755, []byte(initScript))
	if err := cw.close(); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return os.WriteFile(out, buf.Bytes(), 0o644)
}

// runScript is the command's script in the guest's new root. %[1]s is
// the temp dir, %[2]s the modules to load, %[3]s the environment exports,
// %[4]s the working directory, %[5]s the command.
const runScript = `X=%[1]s
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
HOME=/run/home
TMPDIR=/tmp
export PATH HOME TMPDIR
mkdir -p /run/netns /run/home
echo started > "$X/started"
ok=1
for m in %[2]s; do
	modprobe "$m" >> "$X/out" 2>&1 || { echo "vmkernel: modprobe $m failed" >> "$X/out"; ok=0; }
done
%[3]s
if [ $ok = 1 ]; then
	cd %[4]s && %[5]s >> "$X/out" 2>&1
	echo $? > "$X/rc"
else
	echo 125 > "$X/rc"
fi
`

// accelOnce caches the accelerator.
var accelOnce = sync.OnceValue(func() string {
	cpuinfo, _ := os.ReadFile("/proc/cpuinfo")
	if f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0); err == nil {
		f.Close()
		for _, w := range strings.Fields(string(cpuinfo)) {
			if w == "vmx" || w == "svm" {
				return "kvm"
			}
		}
	}
	return "tcg"
})

// accelName says how QEMU runs the guest's code.
func accelName() string {
	if accelOnce() == "kvm" {
		return "KVM"
	}
	return "TCG, no KVM"
}

// accelNote says what the accelerator means for speed.
func accelNote() string {
	if accelOnce() == "kvm" {
		return ": close to native speed"
	}
	return ": every instruction is translated, code runs about 25x slower than on the host and timers fire late, so absolute throughput and CPU figures mean nothing"
}

// runQEMU boots the cached kernel under QEMU and runs argv.
func runQEMU(ctx context.Context, cfg Config, argv []string) (*Result, error) {
	kver, _, err := Setup(ctx)
	if err != nil {
		return nil, err
	}
	qemu, err := lookPath("qemu-system-x86_64")
	if err != nil {
		return nil, fmt.Errorf("%w: %v: %s", ErrUnavailable, err, qemuInstall)
	}
	dir := cacheDir()
	x, err := os.MkdirTemp("", "braid-vm-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(x)
	if err := os.Chmod(x, 0o755); err != nil {
		return nil, err
	}
	var cmd, env, load strings.Builder
	for i, a := range argv {
		if i > 0 {
			cmd.WriteByte(' ')
		}
		cmd.WriteString(quote(a))
	}
	for _, e := range append(append([]string(nil), cfg.Env...), EnvInGuest+"=1") {
		k, v, _ := strings.Cut(e, "=")
		fmt.Fprintf(&env, "%s=%s\nexport %s\n", k, quote(v), k)
	}
	mods := cfg.Load
	if mods == nil {
		mods = DefaultModules
	}
	for i, m := range mods {
		if i > 0 {
			load.WriteByte(' ')
		}
		load.WriteString(quote(m))
	}
	wd := cfg.Dir
	if wd == "" {
		wd = "/"
	}
	script := fmt.Sprintf(runScript, quote(x), load.String(), env.String(), quote(wd), cmd.String())
	if err := os.WriteFile(filepath.Join(x, "run"), []byte(script), 0o644); err != nil {
		return nil, err
	}
	mem, cpus := cfg.Mem, cfg.CPUs
	if mem == "" {
		mem = "1024M"
	}
	if cpus == 0 {
		cpus = 2
	}
	accel := []string{"-accel", "tcg,thread=multi", "-cpu", "max"}
	if accelOnce() == "kvm" {
		accel = []string{"-accel", "kvm", "-cpu", "host"}
	}
	args := append([]string{"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot"}, accel...)
	args = append(args,
		"-smp", strconv.Itoa(cpus), "-m", mem,
		"-kernel", filepath.Join(dir, "vmlinux"), "-initrd", filepath.Join(dir, "initrd.gz"),
		"-append", "console=ttyS0 quiet panic=-1 tsc=reliable init_on_alloc=0 mitigations=off vm.xfer="+x+" vm.kmod="+filepath.Join(dir, "k", "lib", "modules"),
		"-virtfs", "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap",
		"-virtfs", "local,path="+x+",mount_tag=xfer,security_model=none,multidevs=remap",
		"-serial", "file:"+filepath.Join(x, "serial"))
	q := exec.Command(qemu, args...)
	// One writer for both: exec then writes it from one goroutine.
	var qout bytes.Buffer
	q.Stdout, q.Stderr = &qout, &qout
	// A group of its own: a timeout ends QEMU and any helper it forked.
	q.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	start := time.Now()
	if err := q.Start(); err != nil {
		return nil, fmt.Errorf("%w: start %s: %v", ErrUnavailable, qemu, err)
	}
	pid := q.Process.Pid
	stop := func() {}
	if cfg.Output != nil {
		stop = uml.Follow(filepath.Join(x, "out"), cfg.Output)
	}
	werr, timedOut := uml.WaitGroup(ctx, q)
	stop()
	serial, _ := os.ReadFile(filepath.Join(x, "serial"))
	guestErr, _ := os.ReadFile(filepath.Join(x, "console"))
	res := &Result{ExitCode: -1, Elapsed: time.Since(start), PID: pid, Backend: QEMU, Kernel: kver,
		Console: append(append(serial, guestErr...), qout.Bytes()...)}
	res.Output, _ = os.ReadFile(filepath.Join(x, "out"))
	if timedOut {
		return res, fmt.Errorf("%w after %v: %v", ErrTimeout, res.Elapsed.Round(time.Millisecond), context.Cause(ctx))
	}
	if _, err := os.Stat(filepath.Join(x, "started")); err != nil {
		return res, fmt.Errorf("vmkernel: the QEMU guest did not start (qemu: %v); console ends: %s", werr, tail(res.Console, 600))
	}
	rc, err := os.ReadFile(filepath.Join(x, "rc"))
	if err != nil {
		return res, fmt.Errorf("vmkernel: the QEMU guest ended without the command's exit status (qemu: %v); console ends: %s", werr, tail(res.Console, 600))
	}
	res.ExitCode, err = strconv.Atoi(strings.TrimSpace(string(rc)))
	if err != nil {
		return res, fmt.Errorf("vmkernel: exit status %q: %w", rc, err)
	}
	return res, nil
}
