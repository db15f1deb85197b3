// libvips reports warnings through GLib's log, whose default handler
// writes them to the process's stderr. They are routed to Go instead.
#include <glib.h>

#include "_cgo_export.h"
#include "liblog.h"

static void forward_to_go(const gchar *domain, GLogLevelFlags level, const gchar *message, gpointer unused) {
	logFromLibvips((char *) domain, (int) (level & G_LOG_LEVEL_MASK), (char *) message);
}

void route_libvips_log(void) {
	g_log_set_handler("VIPS", G_LOG_LEVEL_MASK, forward_to_go, NULL);
}
