package tokenizer

// pair is a candidate merge of two neighbouring symbols.
type pair struct {
	score       float32 // score of the merged piece
	left, right int32   // symbol indices
	size        int32   // bytes in the merged piece, to detect stale entries
}

// before orders the queue: the highest score merges first and ties go to the
// leftmost pair, the order SentencePiece and llama.cpp both use.
func (p pair) before(q pair) bool {
	if p.score != q.score {
		return p.score > q.score
	}
	return p.left < q.left
}

// pairQueue is a 4-ary max-heap of pairs: a node's four children share one
// 64-byte cache line, which halves the depth of a binary heap and matters
// when a long line without spaces queues a million pairs. It is written out
// rather than built on container/heap to avoid an interface call per
// comparison.
type pairQueue []pair

func (q *pairQueue) push(p pair) {
	*q = append(*q, p)
	h := *q
	i := len(h) - 1
	for i > 0 {
		parent := (i - 1) / 4
		if !p.before(h[parent]) {
			break
		}
		h[i] = h[parent]
		i = parent
	}
	h[i] = p
}

func (q *pairQueue) pop() pair {
	h := *q
	top := h[0]
	last := h[len(h)-1]
	h = h[:len(h)-1]
	*q = h
	if len(h) == 0 {
		return top
	}
	i := 0
	for {
		first := 4*i + 1
		if first >= len(h) {
			break
		}
		best := first
		end := min(first+4, len(h))
		for c := first + 1; c < end; c++ {
			if h[c].before(h[best]) {
				best = c
			}
		}
		if !h[best].before(last) {
			break
		}
		h[i] = h[best]
		i = best
	}
	h[i] = last
	return top
}
