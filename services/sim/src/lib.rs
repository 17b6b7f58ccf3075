//! sim: simulated hardware at the wire (EGM robot controller, SRI/ATI sensor boxes) around a
//! pure world model. Arrives with the robot I/O and force-sensing issues; until then the
//! default cell runs robot-io's in-process ideal robot.
