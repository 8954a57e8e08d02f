// recurse recurses without end, overflowing the call stack.
int down(int n);

// next hides the recursion from the optimizer, which would make it a loop.
int (*volatile next)(int) = down;

int down(int n) { return next(n + 1) + n; }

int main(void) { return down(0); }
