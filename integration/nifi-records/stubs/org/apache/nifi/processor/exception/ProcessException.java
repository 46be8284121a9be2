package org.apache.nifi.processor.exception;

/** Stand-in for nifi-api's ProcessException. */
public class ProcessException extends RuntimeException {
    public ProcessException(final String message) { super(message); }

    public ProcessException(final Throwable cause) { super(cause); }

    public ProcessException(final String message, final Throwable cause) { super(message, cause); }
}
