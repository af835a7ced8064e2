// Linked with one layer library as a whole archive and only the layers it declares below it:
// a call from that layer into a layer above it leaves an undefined symbol and fails this link.
int main() { return 0; }
