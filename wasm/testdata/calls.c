// calls runs for hours without a loop: each call makes two more, 2^62
// calls in all (a loop-free call tree that only a check at function
// entry stops).
int split(int depth);

// next hides the recursion from the optimizer, which would make it a loop.
int (*volatile next)(int) = split;

int split(int depth) {
	if (depth == 0)
		return 1;
	return next(depth - 1) + next(depth - 1);
}

int main(void) { return split(62) == 0; }
