package lockinterop;

/**
 * A group of {@link Driver} commands for one Redisson primitive (read/write lock, fair lock,
 * semaphores), kept in a class of its own. The driver tries each group in turn on the worker's
 * thread.
 */
interface Commands {
    /**
     * Runs {@code words} ({@code <tag> <command> <worker> args...}) if this group knows the
     * command, on the worker's own thread.
     *
     * @return the reply without its tag ({@code ok ...}, {@code busy}, {@code err ...}), or
     *     {@code null} when the command is not this group's
     */
    String run(String command, String[] words) throws Exception;
}
