// Package bench runs braid's transport experiments on an emulated
// multi-homed testbed (package testbed) and measures the peers they are
// compared with in the same run: one plain TCP connection per path alone
// (the "ideal" is their sum), k plain TCP connections striped by hand, and
// one Linux MPTCP connection over the same links.
//
// Every transport measurement is a pair of namespaced hosts: "srv"
// listens, "cli" sends. Figures are ratios measured side by side in one
// run.
//
// The job-system experiments run the braid binary itself as separate
// processes in the hosts (Cluster): a server, workers with one data-plane
// address per network, and the client commands. ClusterRun is the end to
// end run (a server host and two dual-homed workers, a tiled blur, bytes
// per network from the interface counters); SlowWorkerRun times two fast
// workers with and without a slow, CPU-capped one (CPULimit) under each
// scheduling policy.
//
// PaperRun re-runs the seed papers' measurements (braid bench --paper):
// each paper's figures and tables become Figures of Points, every point
// with its repetitions, its spread and the paper's value where the paper
// gives one; Results.Write puts results.json, one plot per figure
// (gonum/plot, SVG) and report.md into a directory, and Report renders
// runs as Markdown, the findings in plain words. Paper 001's peers, Dask
// distributed and Ray, run in a Python virtual environment that PeerVenv
// creates.
package bench
