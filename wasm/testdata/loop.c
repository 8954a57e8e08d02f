// loop never ends.
volatile unsigned long spins;

int main(void) {
	for (;;)
		spins++;
}
