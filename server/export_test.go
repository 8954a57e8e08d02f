package server

// Route is one entry of the route table, for the role matrix test.
type Route struct {
	Pattern, Method string
	// Roles may call the route; nil means it is open.
	Roles []string
}

// Routes returns the route table of s.
func Routes(s *Server) []Route {
	var out []Route
	for _, rt := range s.routes() {
		out = append(out, Route{Pattern: rt.pattern, Method: rt.method, Roles: rt.roles.names()})
	}
	return out
}
