package org.apache.nifi.logging;

/**
 * Stand-in for nifi-api's ComponentLog (nifi-api 2.x lives in the apache/nifi-api repository, which is not
 * compiled here): every message goes to stderr; debug and trace only with -Dnifi.records.debug=true.
 * Only the methods the compiled NiFi classes call are declared.
 */
public interface ComponentLog {
    private static void print(final String level, final String msg, final Object... args) {
        if (("DEBUG".equals(level) || "TRACE".equals(level)) && !Boolean.getBoolean("nifi.records.debug")) {
            return;
        }
        final StringBuilder sb = new StringBuilder("[NiFi ").append(level).append("] ");
        String rest = msg == null ? "null" : msg;
        int i = 0;
        int at;
        while ((at = rest.indexOf("{}")) >= 0 && args != null && i < args.length) {
            sb.append(rest, 0, at).append(args[i++]);
            rest = rest.substring(at + 2);
        }
        sb.append(rest);
        System.err.println(sb);
        if (args != null && args.length > 0 && args[args.length - 1] instanceof Throwable t) {
            t.printStackTrace();
        }
    }

    default boolean isDebugEnabled() { return Boolean.getBoolean("nifi.records.debug"); }
    default boolean isTraceEnabled() { return Boolean.getBoolean("nifi.records.debug"); }
    default boolean isWarnEnabled() { return true; }
    default boolean isErrorEnabled() { return true; }
    default boolean isInfoEnabled() { return true; }

    default void trace(final String msg, final Object... args) { print("TRACE", msg, args); }
    default void trace(final String msg, final Throwable t) { print("TRACE", msg, t); }
    default void debug(final String msg, final Object... args) { print("DEBUG", msg, args); }
    default void debug(final String msg, final Throwable t) { print("DEBUG", msg, t); }
    default void info(final String msg, final Object... args) { print("INFO", msg, args); }
    default void info(final String msg, final Throwable t) { print("INFO", msg, t); }
    default void warn(final String msg, final Object... args) { print("WARN", msg, args); }
    default void warn(final String msg, final Throwable t) { print("WARN", msg, t); }
    default void error(final String msg, final Object... args) { print("ERROR", msg, args); }
    default void error(final String msg, final Throwable t) { print("ERROR", msg, t); }
}
