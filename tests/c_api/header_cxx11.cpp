// kvpool.h compiles as C++11 with -Wall -Wextra -Werror -pedantic (built, never run).
#include <kvpool/kvpool.h>

static_assert(sizeof(kvpool_connect_options) > 0, "kvpool.h is usable from C++11");
