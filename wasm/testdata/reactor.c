// reactor is a library module without _start (build with -mexec-model=reactor).
int add(int a, int b) { return a + b; }
