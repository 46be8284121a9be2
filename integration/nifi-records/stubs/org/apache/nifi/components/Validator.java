package org.apache.nifi.components;

/** Stand-in for nifi-api's Validator (declarations only: nothing is validated here). */
public interface Validator {
    ValidationResult validate(String subject, String input, ValidationContext context);
}
