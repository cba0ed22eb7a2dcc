package rls

// ruleRepeated reports whether two counted descriptors of a request
// resolved to one rule. Those may draw on one count, and are then decided
// one after the other in the request's order, as envoyproxy/ratelimit's
// pipeline applies them: decided in parallel, a later descriptor could
// take its units first, and a check (hits_addend 0), which takes a unit
// and gives it back, could be seen by the other as a unit taken.
func ruleRepeated(nodes []*node) bool {
	for i, n := range nodes {
		if n == nil {
			continue
		}
		for _, m := range nodes[i+1:] {
			if m == n {
				return true
			}
		}
	}
	return false
}
