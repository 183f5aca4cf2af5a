/*
 * hooks_probe.c: the hooks' text the kept container's key reads (spank/plugin/hooktext.c)
 * outside Slurm, for tests/unit/test_plugin_hooktext.py.
 *   hooks_probe KEY=VALUE...      the runtime's environment; prints the text, or NULL
 */
#include <stdio.h>

#include "hooktext.h"

int main(int argc, char **argv)
{
	char *text;

	(void)argc;
	text = sq_hooks_text(argv + 1);
	if (text == NULL)
		printf("NULL\n");
	else
		printf("%s", text);
	return 0;
}
