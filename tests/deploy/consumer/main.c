/* Builds an expression with the installed public API and lowers nothing: enough to show that
 * the headers (gsched/config.h, generated, among them), libgsched.so and the package's link
 * interface work together. */
#include <gsched/array.h>
#include <gsched/config.h>

#include <stdio.h>

int main(void)
{
    gs_array_h a, b;
    int64_t shape[2] = {4, 6}, chunks[2] = {2, 3};
    if (gs_array_random_normal(1, 0.0, 1.0, 2, shape, chunks, &a) != GS_OK) return 1;
    if (gs_array_binary_scalar(GS_BINARY_ADD, a, 1.0, &b) != GS_OK) return 1;
    gs_array_release(a);
    gs_array_release(b);
    printf("gsched consumer ok (gsched %s)\n", GS_VERSION_DESCRIPTION);
    return 0;
}
