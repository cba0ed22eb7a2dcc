package redisx

// Share is one instance's share of a fleet-wide limit among n instances,
// used while Redis does not answer: limit ÷ n rounded DOWN, so that n
// instances together never admit more than limit. It may be 0 (limit < n):
// the instance then admits nothing under that limit until Redis answers,
// the only share that keeps the bound; size limits at least the fleet's
// size to avoid it. 0 stays 0 (no limit), and n < 1 counts as 1.
func Share(limit int64, n int) int64 {
	if limit <= 0 || n <= 1 {
		return max(limit, 0)
	}
	return limit / int64(n)
}

// Instances is the n of Share: expected when the config set it (> 0), else
// the live instances counted (when a count exists), else 1.
func Instances(expected int, counted int) int {
	switch {
	case expected > 0:
		return expected
	case counted > 0:
		return counted
	}
	return 1
}
