package api

import "time"

// Roles of control API credentials. The cluster key's credential (Token)
// is RoleAdmin; tokens made with POST /v1/tokens have the role they were
// given.
const (
	// RoleAdmin may do everything, including managing tokens.
	RoleAdmin = "admin"
	// RoleClient uploads and downloads blobs, submits and follows jobs
	// and pipelines, manages operations and lists workers. It cannot
	// register workers or manage tokens.
	RoleClient = "client"
	// RoleWorker registers a worker, sends its heartbeats and updates and
	// downloads the modules of user operations by hash. It cannot submit
	// jobs, list or read other blobs, or manage tokens.
	RoleWorker = "worker"
	// RoleMonitor only looks: it scrapes the Prometheus metrics and reads
	// jobs, their units' timeline and workers (what the dashboard
	// shows). It cannot read or write blobs, submit or cancel jobs, or
	// change anything.
	RoleMonitor = "monitor"
)

// Roles lists the roles a token may have.
var Roles = []string{RoleAdmin, RoleClient, RoleWorker, RoleMonitor}

// ValidRole reports whether role is one of Roles.
func ValidRole(role string) bool {
	return role == RoleAdmin || role == RoleClient || role == RoleWorker || role == RoleMonitor
}

// TokenRequest asks for a new token (POST /v1/tokens).
type TokenRequest struct {
	// Role is admin, client, worker or monitor.
	Role string `json:"role"`
	// Name labels the token in listings and can name it for revocation:
	// 1 to 64 letters, digits, '.', '_' or '-', not all digits, unique
	// among the server's tokens. Empty means one is made up from the role
	// and the ID.
	Name string `json:"name,omitempty"`
	// Group puts the token in a group (a tenant): tokens of one group see
	// and use each other's jobs, blobs and pipelines, as if one client
	// made them. Empty means the token shares with no one. The same
	// rules as Name apply to it.
	Group string `json:"group,omitempty"`
}

// TokenInfo describes a token; the secret is not part of it.
type TokenInfo struct {
	// ID identifies the token: 16 hex digits.
	ID   string `json:"id"`
	Name string `json:"name"`
	Role string `json:"role"`
	// Group is the token's group; empty if it has none.
	Group   string    `json:"group,omitempty"`
	Created time.Time `json:"created"`
	// LastUsed is when a request last authenticated with the token, to
	// the minute; zero if never.
	LastUsed time.Time `json:"last_used,omitzero"`
	// Revoked is when the token was revoked; zero while it is valid.
	Revoked time.Time `json:"revoked,omitzero"`
}

// TokenCreated is the answer to POST /v1/tokens: the token's description
// and its secret, which the server shows only this once (it keeps only a
// hash).
type TokenCreated struct {
	TokenInfo
	// Token is the secret to send as "Authorization: Bearer <token>".
	Token string `json:"token"`
	// Fingerprint is the SHA-256 fingerprint of the server's TLS
	// certificate ("sha256:..."), empty if the server speaks plain HTTP.
	Fingerprint string `json:"fingerprint,omitempty"`
	// Join is the join token: Token and the fingerprint in one string
	// (JoinToken), for a worker or client to pin the server with.
	Join string `json:"join,omitempty"`
}

// TokenList is the answer to GET /v1/tokens.
type TokenList struct {
	Tokens []TokenInfo `json:"tokens"`
}
