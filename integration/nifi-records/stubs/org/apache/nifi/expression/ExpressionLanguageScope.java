package org.apache.nifi.expression;

/** Stand-in for nifi-api's ExpressionLanguageScope. */
public enum ExpressionLanguageScope {
    NONE,
    ENVIRONMENT,
    FLOWFILE_ATTRIBUTES
}
