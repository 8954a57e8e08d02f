// envimport calls a function the host does not provide: env.boom.
__attribute__((import_module("env"), import_name("boom"))) extern int boom(int);

int main(void) { return boom(1); }
