package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/braid-hpc/braid/testbed"

	"github.com/spf13/pflag"
)

func init() {
	register(&command{
		name:    "testbed",
		summary: "emulated multi-homed hosts: namespaces, shaped links, link faults",
		run:     runTestbed,
		subs:    []string{"up", "down", "show", "exec", "link", "rate", "loss", "list"},
	})
}

// defaultStateDir holds one JSON file per bed so that separate processes
// can drive it.
const defaultStateDir = "/run/braid-testbed"

const testbedUsage = `Usage: braid testbed <up|down|show|exec|link|rate|loss|list> [flags] [args]

Emulates hosts with one interface on each of several networks, on this
machine: one network namespace per host, one Linux bridge per network (in a
hub namespace), and tbf shaping of every link (half duplex unless 'up
--full-duplex'). Every host reaches every other host on k networks, so k
paths. Needs root.

  up      create a bed:          braid testbed up --name lab --hosts a,b --nets 100M,25M
  show    hosts, addresses, rates: braid testbed show --name lab
  exec    run a command in a host: braid testbed exec --name lab a -- ip addr
  link    fail or heal a link:   braid testbed link --name lab a 1 down|up|blackhole|restore
  rate    change a network rate: braid testbed rate --name lab 1 10M
  loss    random packet loss:    braid testbed loss --name lab a 0 1.5   (percent; 0 removes)
  down    end what runs inside, remove the bed: braid testbed down --name lab
  list    list the beds made with up

Flags come before the arguments. Run 'braid testbed <sub> --help' for
each subcommand's flags.
`

func runTestbed(ctx context.Context, env *Env, args []string) int {
	if len(args) == 0 {
		fmt.Fprint(env.Stderr, testbedUsage)
		return 2
	}
	if args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprint(env.Stdout, testbedUsage)
		return 0
	}
	subs := map[string]func(context.Context, *Env, []string) int{
		"up": testbedUp, "down": testbedDown, "show": testbedShow, "exec": testbedExec,
		"link": testbedLink, "rate": testbedRate, "loss": testbedLoss, "list": testbedList,
	}
	sub, ok := subs[args[0]]
	if !ok {
		return unknownSubcommand(env, "testbed", args[0])
	}
	return sub(ctx, env, args[1:])
}

// bedFlags registers the flags every subcommand shares.
type bedFlags struct {
	name, dir *string
}

func addBedFlags(fs *pflag.FlagSet) bedFlags {
	return bedFlags{
		name: fs.String("name", "lab", "`name` of the bed"),
		dir:  fs.String("state-dir", defaultStateDir, "`directory` of the beds' state files"),
	}
}

var bedName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,32}$`)

func (f bedFlags) path() (string, error) {
	if !bedName.MatchString(*f.name) {
		return "", fmt.Errorf("bad --name %q: use 1 to 32 of [A-Za-z0-9_-]", *f.name)
	}
	return filepath.Join(*f.dir, *f.name+".json"), nil
}

// bedFile is the state file of one bed.
type bedFile struct {
	Name    string        `json:"name"`
	Created time.Time     `json:"created"`
	State   testbed.State `json:"state"`
}

// load attaches to the bed named by f.
func (f bedFlags) load() (*testbed.Bed, *bedFile, error) {
	p, err := f.path()
	if err != nil {
		return nil, nil, err
	}
	data, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, fmt.Errorf("no testbed %q (no %s); create it with 'braid testbed up --name %s' or see 'braid testbed list'", *f.name, p, *f.name)
	}
	if err != nil {
		return nil, nil, err
	}
	var bf bedFile
	if err := json.Unmarshal(data, &bf); err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", p, err)
	}
	b, err := testbed.Attach(bf.State)
	if err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", p, err)
	}
	return b, &bf, nil
}

// save writes bf atomically.
func (f bedFlags) save(bf *bedFile) error {
	p, err := f.path()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(*f.dir, 0o755); err != nil {
		return err
	}
	data, err := json.MarshalIndent(bf, "", "  ")
	if err != nil {
		return err
	}
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, p)
}

func testbedUp(ctx context.Context, env *Env, args []string) int {
	fs := newFlags(env, "testbed up", "[--name NAME] [--hosts a,b] [--nets 100M,25M] [--full-duplex]", `
Creates a bed: every host gets one interface on every network, addressed
10.<net+1>.0.<host+1>/24, shaped to the network's rate (K, M, G suffixes
in bit/s; 0 leaves a network unshaped). The bed lives until 'braid
testbed down'; its description is kept in the state directory.

Links are half duplex by default: one token bucket per host and network
shapes both directions of its link together. A ping-pong then pays for
the request and the reply, as on a wire, and measures at most the rate at
every message size (a 1 KB ping-pong over 100M stays below 100 Mbit/s of
effective bandwidth); traffic both ways at once shares the rate, and one
TCP stream gets about 0.93 of it (its acknowledgements share the bucket).

--full-duplex gives each direction its own bucket of the rate: use it for
bulk traffic both ways at once (each direction gets the whole rate, one
stream about 0.95 of it). A token bucket lets a lone packet through at
once instead of holding it for its time on the wire, so there a ping-pong
of small messages measures up to twice the rate.`)
	bf := addBedFlags(fs)
	hosts := fs.String("hosts", "a,b", "comma-separated host `names`")
	nets := fs.String("nets", "100M,25M", "comma-separated network `rates`, one per network")
	full := fs.Bool("full-duplex", false, "give each direction of a link its own bucket of the rate (bulk both ways; a ping-pong of small messages can measure up to twice the rate)")
	half := fs.Bool("half-duplex", false, "both directions of a link share its rate (the default; kept for scripts)")
	asJSON := bedJSONFlag(fs)
	if code := parseFlags(env, fs, args); code >= 0 {
		return code
	}
	if fs.NArg() > 0 {
		env.Errorf("testbed up: unexpected arguments %q", fs.Args())
		return 2
	}
	if *full && *half {
		env.Errorf("testbed up: --full-duplex and --half-duplex contradict each other; give one (half duplex is the default)")
		return 2
	}
	p, err := bf.path()
	if err != nil {
		env.Errorf("testbed up: %v", err)
		return 2
	}
	if _, err := os.Stat(p); err == nil {
		env.Errorf("testbed up: testbed %q exists (%s); remove it with 'braid testbed down --name %s' or pick another --name", *bf.name, p, *bf.name)
		return 1
	}
	spec := testbed.Spec{Hosts: splitList(*hosts)}
	for _, r := range splitList(*nets) {
		bps, err := testbed.ParseRate(r)
		if err != nil {
			env.Errorf("testbed up: --nets: %v", err)
			return 2
		}
		spec.Networks = append(spec.Networks, testbed.Network{Rate: bps, FullDuplex: *full})
	}
	if err := testbed.Available(); err != nil {
		env.Errorf("%v", err)
		return 1
	}
	b, err := testbed.Up(ctx, spec)
	if err != nil {
		env.Errorf("%v", err)
		return 1
	}
	file := &bedFile{Name: *bf.name, Created: time.Now().UTC(), State: b.State()}
	if err := bf.save(file); err != nil {
		env.Errorf("testbed up: save state: %v; removing the bed", err)
		b.Down()
		return 1
	}
	if *asJSON {
		return writeJSONOut(env, "testbed up", newBedJSON(b, file))
	}
	printBed(env.Stdout, b, file)
	return 0
}

func testbedDown(ctx context.Context, env *Env, args []string) int {
	fs := newFlags(env, "testbed down", "[--name NAME]", `
Removes a bed made by 'braid testbed up'. First it ends every process
inside the bed's hosts (those 'braid testbed exec' started, and their
children): SIGTERM, then SIGKILL for any still running 2 s later. Then it
removes the bed's namespaces, and with them every interface, bridge and
qdisc.`)
	bf := addBedFlags(fs)
	if code := parseFlags(env, fs, args); code >= 0 {
		return code
	}
	b, _, err := bf.load()
	if err != nil {
		env.Errorf("testbed down: %v", err)
		return 1
	}
	ended, err := b.EndProcesses(ctx)
	if ended > 0 {
		fmt.Fprintf(env.Stdout, "ended %s inside testbed %s\n", plural(ended, "process", "processes"), *bf.name)
	}
	if err != nil {
		env.Errorf("testbed down: %v; the bed is left up", err)
		return 1
	}
	if err := b.Down(); err != nil {
		env.Errorf("testbed down: %v", err)
		return 1
	}
	p, _ := bf.path()
	if err := os.Remove(p); err != nil {
		env.Errorf("testbed down: %v", err)
		return 1
	}
	fmt.Fprintf(env.Stdout, "testbed %s removed\n", *bf.name)
	return 0
}

func testbedShow(ctx context.Context, env *Env, args []string) int {
	fs := newFlags(env, "testbed show", "[--name NAME]", "Prints a bed's networks, hosts, namespaces, interfaces and addresses.")
	bf := addBedFlags(fs)
	asJSON := bedJSONFlag(fs)
	if code := parseFlags(env, fs, args); code >= 0 {
		return code
	}
	b, file, err := bf.load()
	if err != nil {
		env.Errorf("testbed show: %v", err)
		return 1
	}
	if *asJSON {
		return writeJSONOut(env, "testbed show", newBedJSON(b, file))
	}
	printBed(env.Stdout, b, file)
	return 0
}

func printBed(w io.Writer, b *testbed.Bed, file *bedFile) {
	spec := b.Spec()
	fmt.Fprintf(w, "testbed %s (id %s, up since %s)\n\n", file.Name, b.ID(), file.Created.Format(time.RFC3339))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NET\tNAME\tRATE\tDUPLEX\tSUBNET")
	for j, n := range spec.Networks {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", j, n.Name, testbed.FormatRate(n.Rate), duplex(n), n.Subnet)
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "HOST\tNAMESPACE\tNET\tDEV\tADDRESS")
	for _, h := range spec.Hosts {
		for j := range spec.Networks {
			host, ns := h, b.Namespace(h)
			if j > 0 {
				host, ns = "", ""
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", host, ns, j, b.Dev(h, j), b.Addr(h, j))
		}
	}
	tw.Flush()
}

func testbedExec(ctx context.Context, env *Env, args []string) int {
	fs := newFlags(env, "testbed exec", "[--name NAME] HOST -- COMMAND [ARGS...]", `
Runs a command inside a host's network namespace (ip netns exec) and exits
with its exit code. Example: braid testbed exec --name lab a -- ping -c1 10.1.0.2
A command still running (in the background, say) when 'braid testbed down'
runs is ended by it.`)
	bf := addBedFlags(fs)
	if code := parseFlagsFirst(env, fs, args); code >= 0 {
		return code
	}
	rest := fs.Args()
	if len(rest) > 1 && rest[1] == "--" {
		rest = append(rest[:1:1], rest[2:]...)
	}
	if len(rest) < 2 {
		env.Errorf("testbed exec: want HOST -- COMMAND [ARGS...]")
		helpHint(env, fs.Name())
		return 2
	}
	b, _, err := bf.load()
	if err != nil {
		env.Errorf("testbed exec: %v", err)
		return 1
	}
	cmd := b.Exec(ctx, rest[0], selfPath(rest[1]), rest[2:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, env.Stdout, env.Stderr
	if err := cmd.Run(); err != nil {
		if ee, ok := errors.AsType[*exec.ExitError](err); ok && ee.ExitCode() >= 0 {
			return ee.ExitCode()
		}
		env.Errorf("testbed exec: %v", err)
		return 1
	}
	return 0
}

// network resolves a network given by index or name.
func network(b *testbed.Bed, s string) (int, error) {
	spec := b.Spec()
	if j, err := strconv.Atoi(s); err == nil && j >= 0 && j < len(spec.Networks) {
		return j, nil
	}
	for j, n := range spec.Networks {
		if n.Name == s {
			return j, nil
		}
	}
	return 0, fmt.Errorf("no network %q: give an index 0..%d or a name", s, len(spec.Networks)-1)
}

func testbedLink(ctx context.Context, env *Env, args []string) int {
	fs := newFlags(env, "testbed link", "[--name NAME] HOST NET down|up|blackhole|restore", `
Fails or heals one host's link on one network (NET is an index or a name):
  down       the host's interface goes down: loud, the peer loses carrier
  up         undoes down
  blackhole  the link leaves its bridge: silent, both ends stay up, packets vanish
  restore    undoes blackhole`)
	bf := addBedFlags(fs)
	if code := parseFlags(env, fs, args); code >= 0 {
		return code
	}
	if fs.NArg() != 3 {
		env.Errorf("testbed link: want HOST NET down|up|blackhole|restore")
		helpHint(env, fs.Name())
		return 2
	}
	host, netArg, action := fs.Arg(0), fs.Arg(1), fs.Arg(2)
	b, _, err := bf.load()
	if err != nil {
		env.Errorf("testbed link: %v", err)
		return 1
	}
	j, err := network(b, netArg)
	if err != nil {
		env.Errorf("testbed link: %v", err)
		return 2
	}
	actions := map[string]func(string, int) error{
		"down": b.LinkDown, "up": b.LinkUp, "blackhole": b.Blackhole, "restore": b.Restore,
	}
	f, ok := actions[action]
	if !ok {
		env.Errorf("testbed link: unknown action %q: want down, up, blackhole or restore", action)
		return 2
	}
	if err := f(host, j); err != nil {
		env.Errorf("testbed link: %v", err)
		return 1
	}
	return 0
}

func testbedRate(ctx context.Context, env *Env, args []string) int {
	fs := newFlags(env, "testbed rate", "[--name NAME] NET RATE", `
Changes the rate of every link of a network, both directions (shared on a
half-duplex network; NET is an index or a name; RATE in bit/s with K, M or
G suffix; 0 removes shaping).`)
	bf := addBedFlags(fs)
	if code := parseFlags(env, fs, args); code >= 0 {
		return code
	}
	if fs.NArg() != 2 {
		env.Errorf("testbed rate: want NET RATE")
		helpHint(env, fs.Name())
		return 2
	}
	bps, err := testbed.ParseRate(fs.Arg(1))
	if err != nil {
		env.Errorf("testbed rate: %v", err)
		return 2
	}
	b, file, err := bf.load()
	if err != nil {
		env.Errorf("testbed rate: %v", err)
		return 1
	}
	j, err := network(b, fs.Arg(0))
	if err != nil {
		env.Errorf("testbed rate: %v", err)
		return 2
	}
	if err := b.SetRate(j, bps); err != nil {
		env.Errorf("testbed rate: %v", err)
		return 1
	}
	file.State = b.State()
	if err := bf.save(file); err != nil {
		env.Errorf("testbed rate: save state: %v", err)
		return 1
	}
	return 0
}

func testbedLoss(ctx context.Context, env *Env, args []string) int {
	fs := newFlags(env, "testbed loss", "[--name NAME] HOST NET [PERCENT]", `
Makes the network lose PERCENT of the packets HOST sends on network NET (an
index or a name), at random, in steps of 0.01; 0 removes the loss. Packets
are lost past the host's link, so the sender sees no error. For loss in
both directions of a path, set it on both hosts. Without PERCENT, prints
the loss set and the packets dropped so far. Needs nft (nftables).`)
	bf := addBedFlags(fs)
	asJSON := bedJSONFlag(fs)
	if code := parseFlags(env, fs, args); code >= 0 {
		return code
	}
	if fs.NArg() != 2 && fs.NArg() != 3 {
		env.Errorf("testbed loss: want HOST NET [PERCENT]")
		helpHint(env, fs.Name())
		return 2
	}
	var pct float64
	if fs.NArg() == 3 {
		v, err := strconv.ParseFloat(strings.TrimSuffix(fs.Arg(2), "%"), 64)
		if err != nil {
			env.Errorf("testbed loss: bad PERCENT %q: want a number from 0 to 100", fs.Arg(2))
			return 2
		}
		pct = v
	}
	b, _, err := bf.load()
	if err != nil {
		env.Errorf("testbed loss: %v", err)
		return 1
	}
	j, err := network(b, fs.Arg(1))
	if err != nil {
		env.Errorf("testbed loss: %v", err)
		return 2
	}
	if fs.NArg() == 3 {
		if err := b.SetLoss(fs.Arg(0), j, pct); err != nil {
			env.Errorf("testbed loss: %v", err)
			return 1
		}
		return 0
	}
	cur, dropped, err := b.Loss(fs.Arg(0), j)
	if err != nil {
		env.Errorf("testbed loss: %v", err)
		return 1
	}
	if *asJSON {
		return writeJSONOut(env, "testbed loss", map[string]any{"host": fs.Arg(0), "net": j, "loss_percent": cur, "dropped_packets": dropped})
	}
	fmt.Fprintf(env.Stdout, "%s net %d: loss %g%%, %d packets dropped\n", fs.Arg(0), j, cur, dropped)
	return 0
}

func testbedList(ctx context.Context, env *Env, args []string) int {
	fs := newFlags(env, "testbed list", "[--state-dir DIR]", "Lists the beds made with 'braid testbed up'.")
	bf := addBedFlags(fs)
	asJSON := bedJSONFlag(fs)
	if code := parseFlags(env, fs, args); code >= 0 {
		return code
	}
	files, err := filepath.Glob(filepath.Join(*bf.dir, "*.json"))
	if err != nil {
		env.Errorf("testbed list: %v", err)
		return 1
	}
	type listed struct {
		Name      string `json:"name"`
		StateFile string `json:"state_file"`
	}
	list := []listed{}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".json")
		list = append(list, listed{Name: name, StateFile: f})
		if !*asJSON {
			fmt.Fprintln(env.Stdout, name)
		}
	}
	if *asJSON {
		return writeJSONOut(env, "testbed list", list)
	}
	return 0
}

// selfPath resolves the command "braid" to an executable: the one on PATH,
// or else this very program when it is braid (run from a build directory,
// go run or a test). Other commands are returned as they are.
func selfPath(name string) string {
	if name != "braid" {
		return name
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	if p, err := os.Executable(); err == nil && strings.TrimSuffix(filepath.Base(p), ".exe") == "braid" {
		return p
	}
	return name
}

func bedJSONFlag(fs *pflag.FlagSet) *bool {
	return fs.BoolP("json", "J", false, "print one JSON object instead of text")
}

// writeJSONOut prints v as one JSON line on stdout for command name.
func writeJSONOut(env *Env, name string, v any) int {
	if err := jsonLine(env.Stdout, v); err != nil {
		env.Errorf("%s: %v", name, err)
		return 1
	}
	return 0
}

// bedJSON is a bed as testbed up/show --json print it.
type bedJSON struct {
	Name     string        `json:"name"`
	ID       string        `json:"id"`
	Created  time.Time     `json:"created"`
	Networks []bedNetJSON  `json:"networks"`
	Hosts    []bedHostJSON `json:"hosts"`
}

type bedNetJSON struct {
	Index   int    `json:"index"`
	Name    string `json:"name"`
	RateBps int64  `json:"rate_bps"` // 0: unshaped
	Duplex  string `json:"duplex"`   // full: the rate each way; half: both ways share it
	Subnet  string `json:"subnet"`
}

// duplex names how n's links share their rate between the directions.
func duplex(n testbed.Network) string {
	if n.FullDuplex {
		return "full"
	}
	return "half"
}

type bedHostJSON struct {
	Name       string         `json:"name"`
	Namespace  string         `json:"namespace"`
	Interfaces []bedIfaceJSON `json:"interfaces"`
}

type bedIfaceJSON struct {
	Net     int    `json:"net"`
	Dev     string `json:"dev"`
	Address string `json:"address"`
}

func newBedJSON(b *testbed.Bed, file *bedFile) bedJSON {
	spec := b.Spec()
	out := bedJSON{Name: file.Name, ID: b.ID(), Created: file.Created, Networks: []bedNetJSON{}, Hosts: []bedHostJSON{}}
	for j, n := range spec.Networks {
		out.Networks = append(out.Networks, bedNetJSON{Index: j, Name: n.Name, RateBps: int64(n.Rate), Duplex: duplex(n), Subnet: fmt.Sprint(n.Subnet)})
	}
	for _, h := range spec.Hosts {
		hj := bedHostJSON{Name: h, Namespace: b.Namespace(h), Interfaces: []bedIfaceJSON{}}
		for j := range spec.Networks {
			hj.Interfaces = append(hj.Interfaces, bedIfaceJSON{Net: j, Dev: b.Dev(h, j), Address: fmt.Sprint(b.Addr(h, j))})
		}
		out.Hosts = append(out.Hosts, hj)
	}
	return out
}
