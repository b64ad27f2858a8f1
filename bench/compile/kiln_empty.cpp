// Build cost: the header and an empty main.
#include <kiln/kiln.hpp>
int main() { return 0; }
