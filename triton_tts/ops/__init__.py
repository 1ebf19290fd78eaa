"""Operations: building a runnable repository from voice folders (``repository``), starting
and supervising tritonserver (``server``), healing dead stubs (``watchdog``) and cleaning up
after a dead supervisor (``reaper``)."""
