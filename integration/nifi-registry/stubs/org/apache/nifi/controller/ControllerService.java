package org.apache.nifi.controller;

/** Stand-in for nifi-api's ControllerService (apache/nifi-api): the classes built here only name the type. */
public interface ControllerService {
}
