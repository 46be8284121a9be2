package org.apache.nifi.processor.util;

import org.apache.nifi.components.ValidationResult;
import org.apache.nifi.components.Validator;

/** Stand-in for nifi-api's StandardValidators: the validators named by the compiled descriptors, accepting anything. */
public final class StandardValidators {
    private static final Validator ANY = (subject, input, context) -> new ValidationResult.Builder().valid(true).build();

    public static final Validator NON_EMPTY_VALIDATOR = ANY;
    public static final Validator CHARACTER_SET_VALIDATOR = ANY;
    public static final Validator DATA_SIZE_VALIDATOR = ANY;
    public static final Validator BOOLEAN_VALIDATOR = ANY;
    public static final Validator POSITIVE_INTEGER_VALIDATOR = ANY;
    public static final Validator NON_BLANK_VALIDATOR = ANY;

    private StandardValidators() {
    }
}
