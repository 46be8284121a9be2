package org.apache.nifi.annotation.documentation;

import java.lang.annotation.Retention;
import java.lang.annotation.RetentionPolicy;

/** Stand-in for nifi-api's documentation annotation of the same name. */
@Retention(RetentionPolicy.RUNTIME)
public @interface Tags {
    String[] value();
}
