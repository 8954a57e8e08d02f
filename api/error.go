package api

// Error is the body of every 4xx and 5xx answer. Message says what went
// wrong and, where the caller can fix it, how.
type Error struct {
	Message string `json:"error"`
}

// Error implements error so a client can return the decoded body as is.
func (e *Error) Error() string { return e.Message }

// Health is the answer to GET /v1/health.
type Health struct {
	// Status is "ok" while the server accepts work.
	Status string `json:"status"`
	// Workers is the number of live workers.
	Workers int `json:"workers"`
}

// OpInfo describes one operation for GET /v1/ops and for help texts.
type OpInfo struct {
	Name string `json:"name"`
	// Doc is a one-line description.
	Doc string `json:"doc"`
	// Tiles is true if the operation accepts a tile size.
	Tiles  bool        `json:"tiles"`
	Params []ParamInfo `json:"params,omitempty"`
}

// ParamInfo describes one parameter of an operation.
type ParamInfo struct {
	Name    string `json:"name"`
	Default string `json:"default,omitempty"`
	Doc     string `json:"doc"`
}

// OpList is the answer to GET /v1/ops.
type OpList struct {
	Ops []OpInfo `json:"ops"`
}
