// Package bench runs braid's transport experiments on an emulated
// multi-homed testbed (package testbed) and measures the peers they are
// compared with in the same run: one plain TCP connection per path alone
// (the "ideal" is their sum), k plain TCP connections striped by hand, and
// one Linux MPTCP connection over the same links.
//
// Every measurement is a pair of namespaced hosts: "srv" listens, "cli"
// sends. Figures are ratios measured side by side in one run.
package bench
