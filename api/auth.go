package api

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
)

// Token returns the bearer token that proves, on the control API, that the
// caller holds the cluster key: the hex HMAC-SHA256 of a fixed label under
// the key. Every request but GET PathHealth and SpecPath carries it as
// "Authorization: Bearer <token>". The key itself never travels.
func Token(key []byte) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("braid control API v1"))
	return hex.EncodeToString(m.Sum(nil))
}

// OpFigures is the reserved operation of a figures request on the data
// plane: a Unit with Job 0 and this Op asks the worker for its current
// figures. The worker answers on the same stream with a Result for the same
// Job, ID and Attempt whose Output is a JSON-encoded Register. No real
// operation may have this name (operation names are one word without
// a colon).
const OpFigures = "braid:figures"
