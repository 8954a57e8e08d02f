// tickimport imports braid.tick, the host function package wasm adds for
// itself: a module may import only WASI.
__attribute__((import_module("braid"), import_name("tick"))) void tick(void);

int main(void) {
	tick();
	return 0;
}
