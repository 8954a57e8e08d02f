// Package testbed emulates multi-homed hosts on one Linux machine, so
// braid's multi-path transport can be tested over k real, shaped and
// breakable paths without k networks.
//
// Up makes one network namespace per host and a hub namespace holding one
// bridge per network; every host has one veth link to every bridge, shaped
// by tbf on both ends (so both directions run at the network's rate):
//
//	      ns bt<id>-a                ns bt<id>-hub                 ns bt<id>-b
//	┌────────────────────┐      ┌──────────────────────┐      ┌────────────────────┐
//	│ bt<id>n0 10.1.0.1 ─┼─tbf──┼─tbf─ bt<id>br0 ─ tbf─┼──tbf─┼─ bt<id>n0 10.1.0.2 │
//	│ bt<id>n1 10.2.0.1 ─┼─tbf──┼─tbf─ bt<id>br1 ─ tbf─┼──tbf─┼─ bt<id>n1 10.2.0.2 │
//	└────────────────────┘      └──────────────────────┘      └────────────────────┘
//	  network j: 10.<j+1>.0.0/24 by default, host i is .<i+1>
//
// Nothing is created in the root namespace: veth pairs are made in the hub
// with their peer placed straight into the host namespace, and no namespace
// has a route beyond its own subnets, so the addresses exist and are
// reachable only inside the bed. Every name starts with "bt" and a random
// id, so beds of parallel tests and CI runs do not collide; Down removes
// the namespaces and with them everything else.
//
// Faults: LinkDown/LinkUp take a host's interface down (loud: carrier
// drops), Blackhole/Restore detach the hub end from its bridge (silent:
// both ends stay up, packets vanish), SetRate reshapes a network.
//
// Tests run code inside a host with Run (in-process sockets) or Exec (a
// command), and skip with Skip where beds cannot be made (not root, no
// namespaces). For faults without root, on loopback, see package relay.
package testbed
