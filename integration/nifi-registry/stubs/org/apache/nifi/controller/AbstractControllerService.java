package org.apache.nifi.controller;

import org.apache.nifi.logging.ComponentLog;

/** Stand-in for nifi-api's AbstractControllerService: only getLogger(), which the Confluent reference reader calls
 * (a ComponentLog printing to stderr, from integration/nifi-records/stubs). */
public abstract class AbstractControllerService implements ControllerService {
    private final ComponentLog logger = new ComponentLog() { };

    protected ComponentLog getLogger() {
        return logger;
    }
}
