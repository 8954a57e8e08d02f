package stripe

// split divides the unsent range [pil, pdr] of a busy partition into a
// left and a right part whose sizes follow the weights l and r of the
// threads that will work them (paper sec. 5, eq. 2-9). pil is P(t_il),
// the next fragment of the incrementing thread that keeps the left part;
// pdr is P(t_dr), the next fragment of the decrementing thread that keeps
// the right part. It returns U(left part) and the starting points of the
// two helpers: P(t_dl), where the left part's new decrementing thread
// begins, and P(t_ir) = P(t_dl)+1, where the right part's new
// incrementing thread begins.
//
// U(left part) is truncated as in the paper, then kept within [1, u-1]
// so that neither part is empty; zero weights split evenly. The range
// must hold at least two fragments.
func split(pil, pdr int, l, r float64) (uLeft, pdl, pir int) {
	u := pdr - pil + 1 // eq. 2
	if l+r > 0 {
		uLeft = int(float64(u) * l / (l + r)) // eq. 4
	} else {
		uLeft = u / 2
	}
	uLeft = min(max(uLeft, 1), u-1)
	pdl = pil + uLeft - 1 // eq. 8
	pir = pdl + 1         // eq. 9
	return uLeft, pdl, pir
}
