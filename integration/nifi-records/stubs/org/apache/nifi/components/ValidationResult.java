package org.apache.nifi.components;

/** Stand-in for nifi-api's ValidationResult and its Builder (declarations only). */
public class ValidationResult {
    private final boolean valid;

    private ValidationResult(final boolean valid) {
        this.valid = valid;
    }

    public boolean isValid() { return valid; }

    public static class Builder {
        private boolean valid;

        public Builder subject(final String subject) { return this; }

        public Builder input(final String input) { return this; }

        public Builder explanation(final String explanation) { return this; }

        public Builder valid(final boolean valid) { this.valid = valid; return this; }

        public ValidationResult build() { return new ValidationResult(valid); }
    }
}
