/* Compiled with -Wpadded -Werror: the public structs have no implicit padding (header convention
 * 9), so bindings that declare them field by field get the C layout. */
#include "llmrt/llmrt.h"

int main(void) { return 0; }
