/*
 * hooktext.h: the text of the hooks the runtime will run, so that a kept container's key
 * leaves out what no hook reads (lifecycle.h: sq_life_hooks_read).
 *
 * Enroot runs the executable *.sh files of $ENROOT_SYSCONF_PATH/hooks.d (default
 * /etc/enroot) and of $ENROOT_CONFIG_PATH/hooks.d (default $XDG_CONFIG_HOME/enroot, or
 * $HOME/.config/enroot), the paths taken from the runtime's environment.
 */
#ifndef SQUALL_PLUGIN_HOOKTEXT_H
#define SQUALL_PLUGIN_HOOKTEXT_H

/* Every hook's text, concatenated (heap; "" when there are none), or NULL when a hook
 * directory or file could not be read whole, or enroot.conf moves the hook directories
 * (then nothing may be left out of the key). env: the runtime's environment. */
char *sq_hooks_text(char *const env[]);

#endif
